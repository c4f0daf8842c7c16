"""Items named alike (the same name twice, or names that differ only in case, spaces or
punctuation) can be told apart wherever they are listed: the library page and a job form's picker
show their id, short hash and the date each was added; counts agree with their noun."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User

from tests.webapp.library.conftest import AddItem
from webapp.jobs.services import job_submit
from webapp.library import services
from webapp.library.models import LibraryItem
from webapp.library.selectors import like_named

pytestmark = pytest.mark.django_db


def row(page: str, item: LibraryItem) -> str:
    return page.split(f'data-item="{item.pk}"', 1)[1].split("</tr>", 1)[0]


def test_it_finds_names_a_reader_would_take_for_the_same(add_item: AddItem) -> None:
    first = add_item(b"a\n", name="Routing corpus")
    second = add_item(b"b\n", name="routing-corpus ")
    other = add_item(b"c\n", name="routing corpus 2")
    assert like_named([first, second, other]) == {first.pk, second.pk}


def test_the_library_page_tells_like_named_items_apart(add_item: AddItem, member: User, csrf_client) -> None:
    first = add_item(b"the router picks two experts\n", name="8 images watermarked")
    second = add_item(b"experts specialise\n", name="8 Images watermarked")
    other = add_item(b"load balances\n", name="held-out prompts")
    page = csrf_client(member).get("/t/routing-lab/library/?tab=datasets").content.decode()
    identities = []
    for item in (first, second):
        cells = row(page, item)
        assert "data-like-named" in cells
        identity = re.search(r"data-identity>(.*?)</div>", cells, re.S).group(1)
        assert f"library:{item.pk}" in identity and item.sha256[:8] in identity and "added " in identity
        identities.append(re.sub(r"<[^>]+>", "", identity))
    assert identities[0] != identities[1]
    # An item with a name of its own shows its id and hash, without the date it does not need.
    cells = row(page, other)
    assert "data-like-named" not in cells and f"library:{other.pk}" in cells and "added " not in cells


def test_a_job_forms_picker_tells_like_named_items_apart(add_item: AddItem, member: User, csrf_client) -> None:
    first = add_item(b"the router picks two experts\n", name="corpus")
    second = add_item(b"experts specialise\n", name="Corpus")
    other = add_item(b"load balances\n", name="prompts")
    page = csrf_client(member).get("/t/routing-lab/submit/test-library-consumer/").content.decode()
    labels = dict(re.findall(r'<option value="(library:\d+)"[^>]*>([^<]*)</option>', page))
    assert labels[first.reference] != labels[second.reference]
    for item in (first, second):
        assert labels[item.reference].startswith(f"{item.name} (text, {item.reference}, ")
        assert item.sha256[:8] in labels[item.reference] and "added " in labels[item.reference]
    assert labels[other.reference] == f"prompts (text, {other.reference})"


def test_counts_agree_with_their_noun(add_item: AddItem, member: User, owner: User, team, csrf_client) -> None:
    one = add_item(b"a single line\n", name="one line")
    page = csrf_client(member).get("/t/routing-lab/library/?tab=datasets").content.decode()
    assert re.search(r"\b1 record\b(?!s)", row(page, one)) and "1 records" not in page
    job = job_submit(team=team, user=owner, kind="test-library-consumer", raw_params={"corpus": one.reference})
    with pytest.raises(services.ItemInUse) as refused:
        services.item_delete(item=one, user=owner)
    assert str(refused.value) == f"one line is used by 1 job: {str(job.pk)[:8]}. Delete that job first."
