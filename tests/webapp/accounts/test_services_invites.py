from datetime import timedelta

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from tests.webapp.conftest import make_user
from webapp.accounts.models import Invite, Role
from webapp.accounts.services import AccountError, invite_accept, invite_create
from webapp.accounts.tokens import digest

pytestmark = pytest.mark.django_db


def test_it_emails_an_invite_link_and_stores_only_the_token_hash(team, owner) -> None:
    invite, raw = invite_create(team=team, email="New@Example.com", role=Role.VIEWER, by=owner)
    assert invite.email == "new@example.com"
    assert invite.token_hash == digest(raw) and raw not in invite.token_hash
    assert len(mail.outbox) == 1
    assert raw in mail.outbox[0].body and mail.outbox[0].to == ["new@example.com"]


def test_it_adds_the_user_who_accepts_with_the_invited_role(team, owner) -> None:
    _, raw = invite_create(team=team, email="nia@example.com", role=Role.VIEWER, by=owner)
    nia = make_user("nia")
    membership = invite_accept(raw_token=raw, user=nia)
    assert membership.team == team and membership.role == Role.VIEWER
    assert Invite.objects.get().accepted_by == nia


def test_it_accepts_an_invite_only_once(team, owner) -> None:
    _, raw = invite_create(team=team, email="nia@example.com", role=Role.MEMBER, by=owner)
    invite_accept(raw_token=raw, user=make_user("nia"))
    with pytest.raises(AccountError, match="already been used"):
        invite_accept(raw_token=raw, user=make_user("nils"))


def test_it_refuses_an_expired_or_unknown_invite(team, owner) -> None:
    invite, raw = invite_create(team=team, email="nia@example.com", role=Role.MEMBER, by=owner)
    Invite.objects.filter(pk=invite.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(AccountError, match="expired"):
        invite_accept(raw_token=raw, user=make_user("nia"))
    with pytest.raises(AccountError, match="not valid"):
        invite_accept(raw_token="made-up", user=make_user("nils"))


def test_it_lets_only_owners_invite(team, member) -> None:
    with pytest.raises(PermissionDenied):
        invite_create(team=team, email="x@example.com", role=Role.MEMBER, by=member)
    assert mail.outbox == []
