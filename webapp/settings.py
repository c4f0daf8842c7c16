"""MoE Lab settings, read from the environment with a working default for every value.

Defaults need no server: SQLite in WAL mode and a file-system Kombu transport under ``var/``,
files under ``var/media``. ``DATABASE_URL``, ``CELERY_BROKER_URL``, ``REDIS_URL`` and
``MOELAB_S3_*`` switch to PostgreSQL, Redis and S3-compatible storage. ``MOELAB_ENV=production``
turns on the hardening that ``manage.py check --deploy`` asks for and requires a secret key.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from webapp.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("MOELAB_VAR_DIR", str(BASE_DIR / "var")))

PRODUCTION = env_str("MOELAB_ENV", "development") == "production"
DEBUG = env_bool("DEBUG", not PRODUCTION)
SECRET_KEY = env_str("SECRET_KEY", "" if PRODUCTION else "dev-only-insecure-key-change-me-" + "x" * 32)
if not SECRET_KEY:
    raise RuntimeError("Set SECRET_KEY (or SECRET_KEY_FILE) when MOELAB_ENV=production.")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "" if PRODUCTION else "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
SITE_URL = env_str("SITE_URL", "http://127.0.0.1:8000")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "ninja",
    "webapp.accounts",
    "webapp.jobs",
    "webapp.library",
    "webapp.dashboard",
    "webapp.guides",
]
# The watermark key registry and public portal; its verify-queue task lives in workers/verify.py.
INSTALLED_APPS += ["webapp.portal"]
CELERY_IMPORTS = ["workers.verify"]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "webapp.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

# Every HTML page (webapp/security.py): scripts, styles, fonts and fetches from our own origin
# only. No inline script and no eval: the bundled modules carry all the code, and Vega draws
# through its CSP-safe expression interpreter (frontend/src/js/charts.js). No inline style either:
# templates set no style attribute and scripts style through the DOM, which a policy allows.
# data: images are the favicon and Vega's image export; blob: is what the point-cloud viewer and
# the video player load from. Set MOELAB_CONTENT_SECURITY_POLICY to replace it ("" turns it off).
CONTENT_SECURITY_POLICY = env_str(
    "MOELAB_CONTENT_SECURITY_POLICY",
    "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data: blob:",
            "media-src 'self' blob:",
            "font-src 'self'",
            "connect-src 'self'",
            "worker-src 'self' blob:",
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    ),
)

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "webapp" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# -- database ----------------------------------------------------------------------------------
_SQLITE_DEFAULT = f"sqlite:///{VAR_DIR / 'moelab.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(env_str("DATABASE_URL", _SQLITE_DEFAULT), conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # WAL lets the worker write progress while the web process reads; IMMEDIATE transactions and
    # a busy timeout turn "database is locked" into a short wait.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# -- cache (rate limits need a shared one: Redis when REDIS_URL is set) --------------------------
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# -- auth --------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"
INVITE_DAYS = env_int("MOELAB_INVITE_DAYS", 7)

# -- email (console in development; locmem in tests, set by Django's test runner) ---------------
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "MoE Lab <noreply@localhost>")

# -- i18n --------------------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# -- static files and storage --------------------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every request when it is missing
STATICFILES_DIRS = [p for p in [BASE_DIR / "webapp" / "static"] if p.is_dir()]
MEDIA_ROOT = Path(env_str("MOELAB_MEDIA_ROOT", str(VAR_DIR / "media")))
MEDIA_URL = "/media/"
S3_BUCKET = env_str("MOELAB_S3_BUCKET")
if S3_BUCKET:
    # Workers on other hosts then need no shared disk: artifacts, inputs and logs live in the bucket.
    _default_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": S3_BUCKET,
            "endpoint_url": env_str("MOELAB_S3_ENDPOINT_URL") or None,
            "access_key": env_str("MOELAB_S3_ACCESS_KEY") or None,
            "secret_key": env_str("MOELAB_S3_SECRET_KEY") or None,
            "region_name": env_str("MOELAB_S3_REGION") or None,
            "file_overwrite": True,
            "default_acl": None,
            "querystring_auth": True,
        },
    }
else:
    _default_storage = {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": MEDIA_ROOT}}
STORAGES = {
    "default": _default_storage,
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
DATA_UPLOAD_MAX_NUMBER_FILES = env_int("MOELAB_MAX_UPLOAD_FILES", 64)
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
# Larger uploads spool here, a folder of their own so that what a killed process leaves can be swept
# by age (webapp/scratch.py) without touching anyone else's temporary files.
FILE_UPLOAD_TEMP_DIR = Path(env_str("MOELAB_UPLOAD_SPOOL_DIR", str(VAR_DIR / "upload-spool")))
FILE_UPLOAD_TEMP_DIR.mkdir(parents=True, exist_ok=True)

# -- Celery (long GPU jobs: docs/deployment.md) ---------------------------------------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
BROKER_DIR = VAR_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for _folder in ("queue", "processed", "control"):
        (BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
    # kombu's own file-system channel can hand a consumer a message it has not finished writing.
    from webapp import broker

    broker.register()
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "store_processed": False,
        "control_folder": str(BROKER_DIR / "control"),
        # Kombu polls the folder once a second by default: most of a portal check's wait on the
        # embedded default. A tenth of a second costs a directory listing per poll.
        "polling_interval": 0.1,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {}
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = False  # early ack: a long job is never redelivered after the visibility timeout
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_DISABLE_PREFETCH = CELERY_BROKER_URL.startswith("redis") and env_bool("MOELAB_DISABLE_PREFETCH", True)
# Children are reused: billiard's own recycling (`--max-tasks-per-child`) hands the next job to the
# child that is about to exit and finds it again only on its 5 s timer (4-5 s of dispatch latency in
# bench/results/platform.md), so a fresh process per job is ours instead (the next setting).
CELERY_WORKER_MAX_TASKS_PER_CHILD = env_int("MOELAB_MAX_TASKS_PER_CHILD", 0) or None
#: GPU workers run each job in a process of its own, forked from the warm pool child and gone when
#: the job ends, so no CUDA context, allocator cache or leaked tensor outlives a job
#: (workers/forked.py; docker-compose.yml's worker-gpu sets it).
WORKER_FRESH_PROCESS_PER_JOB = env_bool("MOELAB_FRESH_PROCESS_PER_JOB", False)
#: Modules the worker's parent imports before it forks its pool (workers/preload.py), so a fresh
#: process starts with them loaded. "default" stands for torch, numpy, the job machinery and every
#: kind's module; it is the default when WORKER_FRESH_PROCESS_PER_JOB is on. Add more by name
#: (MOELAB_WORKER_PRELOAD=default,transformers); an empty value preloads nothing.
WORKER_PRELOAD_MODULES = env_list("MOELAB_WORKER_PRELOAD", "default" if WORKER_FRESH_PROCESS_PER_JOB else "")
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
REAPER_INTERVAL_SECONDS = env_int("MOELAB_REAPER_INTERVAL_SECONDS", 15)
HEARTBEAT_STALE_SECONDS = env_int("MOELAB_HEARTBEAT_STALE_SECONDS", 60)
WORKER_UP_SECONDS = env_int("MOELAB_WORKER_UP_SECONDS", 30)
#: Refuse a job whose ``estimate`` needs more memory than this (bytes; 0 = no check).
WORKER_MEMORY_LIMIT = env_int("MOELAB_WORKER_MEMORY_BYTES", 0)

# -- worker scratch (workers/scratch.py): each worker sweeps what killed jobs left in its temp dir --
SCRATCH_SWEEP_SECONDS = env_int("MOELAB_SCRATCH_SWEEP_SECONDS", 300)
# -- what a killed job finished, for the next attempt or a re-run (workers/resume.py) --
RESUME_DIR = Path(env_str("MOELAB_RESUME_DIR", str(VAR_DIR / "resume")))
RESUME_DAYS = env_int("MOELAB_RESUME_DAYS", 7)

# -- team library (uploads land in a local part file until complete; workers cache items by sha256) --
LIBRARY_UPLOAD_DIR = Path(env_str("MOELAB_UPLOAD_DIR", str(VAR_DIR / "uploads")))
LIBRARY_MAX_BYTES = env_int("MOELAB_LIBRARY_MAX_BYTES", 64 * 2**30)
# An upload with no new chunk for this long is abandoned: its row and part file are dropped.
LIBRARY_UPLOAD_ABANDON_SECONDS = env_int("MOELAB_UPLOAD_ABANDON_SECONDS", 24 * 3600)
LIBRARY_CACHE_DIR = Path(env_str("MOELAB_LIBRARY_CACHE", str(VAR_DIR / "library-cache")))
LIBRARY_CACHE_BYTES = env_int("MOELAB_LIBRARY_CACHE_BYTES", 20 * 2**30)
#: A pending item whose validation was asked this long ago without an answer is asked again.
LIBRARY_INGEST_RETRY_SECONDS = env_int("MOELAB_LIBRARY_INGEST_RETRY_SECONDS", 600)

# -- production hardening --------------------------------------------------------------------------
if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("MOELAB_SSL_REDIRECT", True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # health checks speak plain HTTP inside the network
    SECURE_HSTS_SECONDS = env_int("MOELAB_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("MOELAB_HSTS_PRELOAD", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"

# A refused request (403, a CSRF failure, any 4xx) is one line, method, path, user id and reason,
# never a traceback (webapp/security.py). The filter sits on the loggers Django writes them to, so
# it rewrites the record before any handler, ours or a deployment's, sees it.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"client_error_one_line": {"()": "webapp.security.ClientErrorOneLine"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django.request": {"filters": ["client_error_one_line"]},
        "django.security.csrf": {"filters": ["client_error_one_line"]},
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}
