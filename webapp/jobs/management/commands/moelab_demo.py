"""``manage.py moelab_demo``: a demo user and team for ``make run``, with printed credentials.

Idempotent: running it again keeps the user and team and resets the demo password, so the
printed credentials always work.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandParser

from webapp.accounts.models import Membership, Role, Team

DEMO_TEAM_SLUG = "demo"


class Command(BaseCommand):
    help = "Create (or refresh) the demo user and team and print how to log in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo")
        parser.add_argument("--password", default="moelab-demo")
        parser.add_argument("--url", default="http://127.0.0.1:8000")

    def handle(self, *args: Any, username: str, password: str, url: str, **options: Any) -> None:
        user, _ = User.objects.get_or_create(username=username, defaults={"email": f"{username}@localhost"})
        user.set_password(password)
        user.is_staff = user.is_superuser = True  # the demo user can open the admin site too
        user.save()
        team, _ = Team.objects.get_or_create(slug=DEMO_TEAM_SLUG, defaults={"name": "Demo team"})
        Membership.objects.update_or_create(team=team, user=user, defaults={"role": Role.OWNER})
        self.stdout.write(
            self.style.SUCCESS(f"MoE Lab is at {url}/  —  log in as {username} / {password} (team {team.name}).")
        )
