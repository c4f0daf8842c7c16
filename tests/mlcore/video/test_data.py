import numpy as np
import pytest

from mlcore.data.video import DIRECTIONS, GLYPH, VideoDataError, bouncing_digits, glyphs, trajectory


def centroid(frame):
    weights = frame + 1.0
    ys, xs = np.indices(frame.shape)
    return (weights * ys).sum() / weights.sum(), (weights * xs).sum() / weights.sum()


def test_clips_have_the_requested_shape_range_and_labels():
    batch = bouncing_digits(6, frames=5, size=20, seed=1, digits=np.arange(6), directions=np.arange(6) % 4)
    assert batch.clips.shape == (6, 5, 20, 20) and batch.clips.dtype == np.float32
    assert batch.clips.min() == -1.0 and batch.clips.max() <= 1.0
    assert batch.digits.tolist() == list(range(6)) and batch.directions.tolist() == [0, 1, 2, 3, 0, 1]


def test_the_first_step_moves_the_glyph_in_the_labelled_direction():
    batch = bouncing_digits(40, frames=2, size=16, seed=2)
    expected = {0: (0, 1), 1: (0, -1), 2: (1, 0), 3: (-1, 0)}
    for clip, direction in zip(batch.clips, batch.directions):
        (y0, x0), (y1, x1) = centroid(clip[0]), centroid(clip[1])
        dy, dx = expected[int(direction)]
        moved = (y1 - y0, x1 - x0)
        assert np.sign(np.round(moved[0], 3)) == dy and np.sign(np.round(moved[1], 3)) == dx, DIRECTIONS[direction]


def test_a_glyph_bounces_off_the_wall_and_stays_inside():
    path = trajectory((0, 6), (0, 2), 6, room=8)
    assert [x for _, x in path] == [6, 8, 6, 4, 2, 0]


def test_the_same_seed_gives_the_same_clips_and_another_seed_different_ones():
    a, b, c = (bouncing_digits(4, seed=s) for s in (5, 5, 6))
    assert np.array_equal(a.clips, b.clips) and not np.array_equal(a.clips, c.clips)


def test_held_out_glyphs_are_not_training_glyphs():
    train, _ = glyphs("train")
    test, _ = glyphs("test")
    assert len(train) == 1500 and len(test) == 297
    flat_train = {g.tobytes() for g in train}
    assert sum(g.tobytes() in flat_train for g in test) < 5  # scikit-learn's digits hold a few exact duplicates


def test_static_clips_do_not_move():
    batch = bouncing_digits(3, frames=4, seed=0, static=True)
    assert all(np.array_equal(clip[0], clip[-1]) for clip in batch.clips)


def test_a_canvas_smaller_than_the_glyph_is_refused():
    with pytest.raises(VideoDataError, match=f"at least {GLYPH}"):
        bouncing_digits(1, size=6)
