# One image for web, workers and beat (docker-compose.yml picks the command).
# Stage 1 bundles the browser code; stage 2 is the Python application.
FROM node:22-bookworm-slim AS frontend
WORKDIR /src
COPY frontend/package.json frontend/package-lock.json frontend/
RUN cd frontend && npm ci --no-audit --no-fund
COPY frontend frontend
COPY webapp/static webapp/static
RUN cd frontend && npm run build

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=webapp.settings MOELAB_VAR_DIR=/var/lib/moelab
RUN apt-get update && apt-get install -y --no-install-recommends git libusb-1.0-0 libvulkan1 mesa-vulkan-drivers curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 moelab && mkdir -p /var/lib/moelab && chown moelab /var/lib/moelab
WORKDIR /app
# Dependencies first, so code changes do not reinstall them. On Linux x86_64 PyPI's torch wheel
# carries CUDA, which the GPU worker needs; the lock pins its version.
COPY requirements.lock pyproject.toml ./
RUN pip install -r requirements.lock
COPY . .
COPY --from=frontend /src/webapp/static/build webapp/static/build
RUN pip install --no-deps -e . \
    && SECRET_KEY=collectstatic-only MOELAB_ENV=production python manage.py collectstatic --noinput -v0
USER moelab
EXPOSE 8000
CMD ["gunicorn", "webapp.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--timeout", "120"]
