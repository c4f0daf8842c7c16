"""At submission the web refuses an upload the job would ignore, and stores the parameters as the
job will use them: a reference that an upload replaced is cleared."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from webapp.jobs.models import Job
from webapp.jobs.services import SubmitError, job_rerun, job_submit

pytestmark = pytest.mark.django_db

RUNS = b"name,kind,total_params,active_params,experts,top_k,shared_experts,granularity,tokens,flops,loss\n"


def test_an_upload_the_chosen_constants_would_not_read_is_refused_next_to_the_field(team, member) -> None:
    with pytest.raises(SubmitError) as caught:
        job_submit(
            team=team,
            user=member,
            kind="moe-planner",
            raw_params={"constants": "bundled"},
            files={"runs": [SimpleUploadedFile("runs.csv", RUNS + b"a,dense,1,1,1,1,0,1,1,1,1\n")]},
        )
    [(field, message)] = caught.value.errors
    assert field == "constants" and "would not read it" in message
    assert not Job.objects.exists()


def test_a_text_upload_clears_the_dataset_it_replaces_and_a_rerun_keeps_it_cleared(team, member) -> None:
    text = SimpleUploadedFile("notes.txt", b"The Zen of Python, by Tim Peters.\nBeautiful is better than ugly.\n" * 20)
    job = job_submit(team=team, user=member, kind="distill", raw_params={}, files={"text_file": [text]})
    job.refresh_from_db()
    assert job.params["dataset"] is None and job.params["model"] == "zoo:moe-lm-tiny"
    assert job.inputs.get().format == "txt"
    again = job_rerun(job=job, user=member)
    assert again.params["dataset"] is None
