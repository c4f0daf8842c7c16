"""Bearer-token authentication for the JSON APIs: the tokens are the accounts app's (created on the
API tokens page, stored hashed), so every API that takes them imports them from here."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest
from ninja.security import HttpBearer

from webapp.accounts.services import user_for_api_token


class ApiTokenAuth(HttpBearer):
    """``Authorization: Bearer <token>``; tokens are created on the API tokens page and stored hashed."""

    def authenticate(self, request: HttpRequest, token: str) -> AbstractBaseUser | None:
        return user_for_api_token(token)
