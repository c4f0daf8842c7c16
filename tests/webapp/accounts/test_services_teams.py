import pytest
from django.core.exceptions import PermissionDenied

from tests.webapp.conftest import make_user
from webapp.accounts.models import Membership, Role
from webapp.accounts.selectors import team_for_user, teams_for_user
from webapp.accounts.services import AccountError, membership_remove, membership_set_role, team_create

pytestmark = pytest.mark.django_db


def test_it_makes_the_creator_the_owner_of_a_new_team() -> None:
    user = make_user("ada")
    team = team_create(name="Sparse Experts", owner=user)
    assert team.slug == "sparse-experts"
    assert Membership.objects.get(team=team, user=user).role == Role.OWNER
    assert list(teams_for_user(user)) == [team]


def test_it_gives_two_teams_with_the_same_name_different_slugs() -> None:
    user = make_user("ada")
    assert team_create(name="Lab", owner=user).slug != team_create(name="Lab", owner=user).slug


def test_it_refuses_to_demote_the_last_owner(team, owner, member) -> None:
    with pytest.raises(AccountError, match="at least one owner"):
        membership_set_role(team=team, user=owner, role=Role.MEMBER, by=owner)
    membership_set_role(team=team, user=member, role=Role.OWNER, by=owner)
    membership_set_role(team=team, user=owner, role=Role.VIEWER, by=owner)
    assert Membership.objects.get(team=team, user=owner).role == Role.VIEWER


def test_it_refuses_to_remove_the_last_owner(team, owner) -> None:
    with pytest.raises(AccountError, match="at least one owner"):
        membership_remove(team=team, user=owner, by=owner)


def test_it_lets_only_owners_change_roles(team, member, viewer) -> None:
    with pytest.raises(PermissionDenied):
        membership_set_role(team=team, user=viewer, role=Role.OWNER, by=member)


def test_it_lets_a_member_leave_and_an_owner_remove_people(team, owner, member, viewer) -> None:
    membership_remove(team=team, user=member, by=member)
    membership_remove(team=team, user=viewer, by=owner)
    assert list(Membership.objects.filter(team=team).values_list("user__username", flat=True)) == ["olivia"]


def test_it_hides_a_team_from_outsiders_and_refuses_writes_to_viewers(team, viewer, outsider) -> None:
    from django.http import Http404

    with pytest.raises(Http404):
        team_for_user(outsider, team.slug)
    assert team_for_user(viewer, team.slug) == team
    with pytest.raises(PermissionDenied):
        team_for_user(viewer, team.slug, write=True)
