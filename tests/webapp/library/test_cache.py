"""The worker's cache of library items: bounded in bytes, least recently used out first."""

from __future__ import annotations

import contextvars
from pathlib import Path

import pytest

from webapp.library.cache import LibraryCache, leases


def filler(size: int, calls: list[str]):
    def fill(folder: Path) -> None:
        calls.append(folder.parent.name)
        (folder / "blob").write_bytes(b"x" * size)

    return fill


def key(n: int) -> str:
    return f"{n:064x}"


def test_it_evicts_the_least_recently_used_items_when_over_its_size(tmp_path: Path) -> None:
    cache = LibraryCache(tmp_path, max_bytes=3000)
    calls: list[str] = []
    for n in (1, 2, 3):
        cache.get(key(n), filler(1000, calls))
    cache.get(key(1), filler(1000, calls))  # a hit: item 1 becomes the most recently used
    cache.get(key(4), filler(1000, calls))
    assert [k for k, _, _ in cache.entries()] == [key(3), key(1), key(4)]
    assert cache.total_bytes() == 3000
    assert calls == [key(1), key(2), key(3), key(4)]  # the hit did not fetch again


def test_it_keeps_an_item_larger_than_the_whole_cache_while_it_is_used(tmp_path: Path) -> None:
    cache = LibraryCache(tmp_path, max_bytes=1500)
    cache.get(key(1), filler(1000, []))
    big = cache.get(key(2), filler(5000, []))
    assert (big / "blob").stat().st_size == 5000
    assert [k for k, _, _ in cache.entries()] == [key(2)]


def test_a_failed_fetch_leaves_nothing_behind(tmp_path: Path) -> None:
    cache = LibraryCache(tmp_path, max_bytes=10_000)

    def broken(folder: Path) -> None:
        (folder / "half").write_bytes(b"x" * 10)
        raise OSError("storage went away")

    with pytest.raises(OSError):
        cache.get(key(1), broken)
    assert cache.entries() == [] and not (tmp_path / key(1)).exists()
    assert (cache.get(key(1), filler(10, [])) / "blob").exists()


def test_it_refuses_a_key_that_is_not_a_digest(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sha256"):
        LibraryCache(tmp_path, max_bytes=10).get("../etc", filler(1, []))


def test_it_never_evicts_an_item_that_a_running_job_holds(tmp_path: Path) -> None:
    # Two worker processes on one host share the cache. flock makes each open file a holder of its
    # own, so a second cache object, run outside the job's context, behaves like a sibling process.
    running_job, sibling = LibraryCache(tmp_path, max_bytes=2000), LibraryCache(tmp_path, max_bytes=2000)

    def sibling_gets(n: int) -> Path:
        return contextvars.Context().run(sibling.get, key(n), filler(1000, []))

    with leases():
        held = running_job.get(key(1), filler(1000, []))
        sibling_gets(2)
        sibling_gets(3)  # over the bound: the least recently used is item 1, but the job holds it
        assert (held / "blob").exists()
        assert [k for k, _, _ in sibling.entries()] == [key(1), key(3)]
    sibling_gets(4)  # the job is over: item 1 goes now
    assert [k for k, _, _ in sibling.entries()] == [key(3), key(4)]


def test_outside_a_job_nothing_is_held(tmp_path: Path) -> None:
    cache = LibraryCache(tmp_path, max_bytes=1000)
    cache.get(key(1), filler(1000, []))
    cache.get(key(2), filler(1000, []))
    assert [k for k, _, _ in cache.entries()] == [key(2)]
