"""Jobs take library items by ``library:ID``: the exact version is recorded at submission, a job's
outputs are registered as items made by it, and an item in use cannot be deleted."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from mlcore.jobs.params import Dataset
from tests.webapp.library.conftest import AddItem
from webapp.accounts.models import Team
from webapp.jobs import services as job_services
from webapp.jobs.models import Job
from webapp.jobs.resolver import PlatformResolver
from webapp.library import services
from webapp.library.models import LibraryItem, LibraryUse

pytestmark = pytest.mark.django_db


def submit(team: Team, user: User, **params: object) -> Job:
    return job_services.job_submit(team=team, user=user, kind="test-library-consumer", raw_params=params)


def test_a_job_records_the_exact_item_version_it_uses(team: Team, owner: User, corpus: LibraryItem) -> None:
    job = submit(team, owner, corpus=corpus.reference)
    use = LibraryUse.objects.get(job=job)
    assert (use.item, use.param, use.sha256) == (corpus, "corpus", corpus.sha256)
    clone = job_services.job_rerun(job=job, user=owner)
    assert LibraryUse.objects.get(job=clone).item == corpus


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("library:999999", "was not found in your team's library"),
        ("library:abc", "was not found in your team's library"),
    ],
)
def test_it_refuses_a_reference_to_no_item(team: Team, owner: User, reference: str, message: str) -> None:
    with pytest.raises(job_services.SubmitError, match=message):
        submit(team, owner, corpus=reference)


def test_it_refuses_another_teams_item(other_team: Team, outsider: User, team: Team, owner: User, corpus) -> None:
    with pytest.raises(job_services.SubmitError, match="was not found in your team's library"):
        job_services.job_submit(
            team=other_team, user=outsider, kind="test-library-consumer", raw_params={"corpus": corpus.reference}
        )


def test_it_refuses_an_item_of_a_kind_the_job_does_not_accept(team: Team, owner: User, corpus) -> None:
    with pytest.raises(job_services.SubmitError, match="is a text; this job accepts hf-moe-lm"):
        submit(team, owner, model=corpus.reference)


def test_it_refuses_an_item_still_being_validated(team: Team, owner: User, corpus: LibraryItem) -> None:
    LibraryItem.objects.filter(pk=corpus.pk).update(status=LibraryItem.Status.PENDING)
    with pytest.raises(job_services.SubmitError, match="is validating, not ready"):
        submit(team, owner, corpus=corpus.reference)


def test_deleting_an_item_in_use_is_refused_with_the_jobs_that_use_it(team: Team, owner: User, corpus) -> None:
    first, second = submit(team, owner, corpus=corpus.reference), submit(team, owner, corpus=corpus.reference)
    with pytest.raises(services.ItemInUse) as refused:
        services.item_delete(item=corpus, user=owner)
    assert refused.value.jobs == [first, second]
    assert str(first.pk)[:8] in str(refused.value) and str(second.pk)[:8] in str(refused.value)
    Job.objects.filter(pk__in=[first.pk, second.pk]).update(status=Job.Status.SUCCEEDED)
    for job in (first, second):
        job_services.job_delete(job=Job.objects.get(pk=job.pk), user=owner)
    services.item_delete(item=corpus, user=owner)
    assert not LibraryItem.objects.filter(pk=corpus.pk).exists()


def test_the_worker_resolver_fetches_an_item_once_into_its_cache(team: Team, corpus: LibraryItem, settings) -> None:
    param = Dataset(name="corpus", accepts=("text",))
    folder = PlatformResolver(team=team.pk).resolve(param, corpus.reference)
    assert (folder / "corpus.txt").read_text().startswith("the router")
    assert folder.is_relative_to(settings.LIBRARY_CACHE_DIR / corpus.sha256)
    corpus.file.delete(save=False)  # a second job finds it in the cache, without storage
    assert PlatformResolver(team=team.pk).resolve(param, corpus.reference) == folder


def test_the_submit_form_offers_the_teams_items_filtered_by_what_the_kind_accepts(
    team: Team, owner: User, corpus: LibraryItem, add_item: AddItem, tiny_moe, csrf_client
) -> None:
    from tests.webapp.library.conftest import zip_folder

    model = add_item(zip_folder(tiny_moe), kind="hf-moe-lm", name="tiny mixtral", filename="m.zip")
    page = csrf_client(owner).get("/t/routing-lab/submit/test-library-consumer/").content.decode()
    model_select = page.split('id="param-model"')[1].split("</select>")[0]
    corpus_select = page.split('id="param-corpus"')[1].split("</select>")[0]
    assert f'value="{model.reference}"' in model_select and corpus.reference not in model_select
    assert f'value="{corpus.reference}"' in corpus_select and model.reference not in corpus_select
    assert "zoo:moe-lm-tiny" in model_select and "zoo:shakespeare" in corpus_select
