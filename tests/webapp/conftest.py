"""Shared people and clients for webapp tests: an owner, a member, a viewer and an outsider of
one team, and a client that enforces CSRF like a browser does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.accounts.models import Membership, Role, Team

PASSWORD = "a-long-test-password-1"


@pytest.fixture(autouse=True)
def fast_passwords(settings) -> None:
    """PBKDF2 costs half a second a user; tests create several per test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def media_in_tmp(settings, tmp_path) -> None:
    """Uploads and artifacts of a test go to its own folder, never to the project's ``var/``."""
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "media"},
        },
    }


def make_user(username: str) -> User:
    return User.objects.create_user(username=username, email=f"{username}@example.com", password=PASSWORD)


@pytest.fixture
def team(db: None) -> Team:
    return Team.objects.create(name="Routing Lab", slug="routing-lab")


@pytest.fixture
def other_team(db: None) -> Team:
    return Team.objects.create(name="Other Lab", slug="other-lab")


def _member(team: Team, username: str, role: str) -> User:
    user = make_user(username)
    Membership.objects.create(team=team, user=user, role=role)
    return user


@pytest.fixture
def owner(team: Team) -> User:
    return _member(team, "olivia", Role.OWNER)


@pytest.fixture
def member(team: Team) -> User:
    return _member(team, "mario", Role.MEMBER)


@pytest.fixture
def viewer(team: Team) -> User:
    return _member(team, "vera", Role.VIEWER)


@pytest.fixture
def outsider(other_team: Team) -> User:
    return _member(other_team, "otto", Role.OWNER)


@pytest.fixture
def csrf_client() -> Callable[[User | None], Client]:
    """``csrf_client(user)``: a client that enforces CSRF checks, logged in as ``user`` (or anonymous)."""

    def make(user: User | None = None) -> Client:
        client = Client(enforce_csrf_checks=True)
        if user is not None:
            client.force_login(user)
        return client

    return make
