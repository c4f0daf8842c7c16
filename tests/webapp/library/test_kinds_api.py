"""The library's kinds come from the item registry (``mlcore.items``), as the job kinds come from
their specs: the API lists them, and the upload form offers exactly them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mlcore.items.registry import ALL_KINDS
from tests.webapp.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def test_the_api_lists_each_library_kind_with_its_category_and_formats(api_as: Callable[[str], ApiClient]) -> None:
    response = api_as("viewer").get("/api/v1/library/kinds")
    assert response.status_code == 200
    kinds = response.json()
    assert [k["name"] for k in kinds] == list(ALL_KINDS)
    hf = next(k for k in kinds if k["name"] == "hf-moe-lm")
    assert hf["category"] == "model" and {"zip", "tar"} <= set(hf["formats"]) and hf["title"]


def test_the_kinds_need_a_token(client) -> None:
    assert client.get("/api/v1/library/kinds").status_code == 401


def test_the_add_page_offers_the_registry_s_kinds_and_no_other(client, member, team) -> None:
    client.force_login(member)
    page = client.get(f"/t/{team.slug}/library/add/").content.decode()
    for kind in ALL_KINDS:
        assert f'<option value="{kind}">{kind}</option>' in page
    assert 'value="watermark-keyring"' not in page and 'value="video-classifier"' not in page
