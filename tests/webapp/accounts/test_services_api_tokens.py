import pytest
from django.core.exceptions import PermissionDenied

from webapp.accounts.models import ApiToken
from webapp.accounts.services import api_token_create, api_token_revoke, user_for_api_token

pytestmark = pytest.mark.django_db


def test_it_finds_the_user_of_a_token_it_created(owner) -> None:
    token, raw = api_token_create(user=owner, name="laptop")
    assert user_for_api_token(raw) == owner
    assert token.prefix == raw[:8]
    assert raw not in {token.key_hash, token.prefix}
    assert ApiToken.objects.get().last_used_at is not None


def test_it_refuses_a_revoked_or_unknown_token(owner) -> None:
    token, raw = api_token_create(user=owner, name="laptop")
    api_token_revoke(token=token, by=owner)
    assert user_for_api_token(raw) is None
    assert user_for_api_token("mlab_nonsense") is None
    assert user_for_api_token("") is None


def test_it_lets_only_the_owner_of_a_token_revoke_it(owner, member) -> None:
    token, raw = api_token_create(user=owner, name="laptop")
    with pytest.raises(PermissionDenied):
        api_token_revoke(token=token, by=member)
    assert user_for_api_token(raw) == owner
