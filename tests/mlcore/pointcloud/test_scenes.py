import numpy as np
import pytest

from mlcore.pointcloud import scenes, sensors
from mlcore.pointcloud.datasets import DATASETS, IGNORE, grid_sample, make_scan, point_features
from mlcore.pointcloud.scenes import LABEL_ID


def test_a_ray_hits_the_nearest_box_at_the_analytic_distance():
    rng = np.random.default_rng(0)
    scene = scenes.Scene("indoor", LABEL_ID["floor"], (0.5, 0.5, 0.5))
    scene.box(rng, "cabinet", (2.0, -1.0, 0.0), (3.0, 1.0, 2.0))
    scene.box(rng, "table", (5.0, -1.0, 0.0), (6.0, 1.0, 2.0))
    dirs = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 0.0, 1.0]])
    hits = sensors.cast(scene, np.array([0.0, 0.0, 1.0]), dirs)
    assert hits.t[0] == pytest.approx(2.0) and hits.label[0] == LABEL_ID["cabinet"]
    assert hits.normal[0].tolist() == [-1.0, 0.0, 0.0]
    assert hits.t[1] == pytest.approx(1.0) and hits.label[1] == LABEL_ID["floor"]
    assert not np.isfinite(hits.t[2]) and hits.label[2] == -1


def test_cylinders_and_spheres_are_hit_on_their_surface():
    rng = np.random.default_rng(0)
    scene = scenes.Scene("outdoor", LABEL_ID["road"], (0.2, 0.2, 0.2))
    scene.cylinder(rng, "pole", 4.0, 0.0, 0.0, 5.0, 0.5)
    scene.sphere(rng, "vegetation", 0.0, 6.0, 1.0, 1.0)
    hits = sensors.cast(scene, np.array([0.0, 0.0, 1.0]), np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    assert hits.t[0] == pytest.approx(3.5) and hits.label[0] == LABEL_ID["pole"]
    assert hits.t[1] == pytest.approx(5.0) and hits.label[1] == LABEL_ID["vegetation"]


def test_a_scan_is_reproducible_and_each_index_is_a_different_scene():
    a, again, other = make_scan("A", 3), make_scan("A", 3), make_scan("A", 4)
    assert np.array_equal(a.xyz, again.xyz) and np.array_equal(a.labels, again.labels)
    assert len(a) != len(other) or not np.array_equal(a.xyz, other.xyz)
    assert not np.array_equal(make_scan("A", 0, "train").xyz[:50], make_scan("A", 0, "val").xyz[:50])


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_every_dataset_labels_only_its_own_taxonomy(name):
    spec = DATASETS[name]
    scan = make_scan(name, 0)
    present = set(np.unique(scan.labels).tolist()) - {IGNORE}
    assert present <= set(spec.class_ids)
    assert len(present) >= 4  # floors, walls and furniture, or roads, buildings and cars
    assert len(scan) > 5_000 and np.isfinite(scan.xyz).all()


def test_the_coarse_taxonomies_merge_classes_instead_of_labelling_them():
    b = make_scan("B", 0)
    assert LABEL_ID["ceiling"] not in b.labels and LABEL_ID["cabinet"] not in b.labels
    d = make_scan("D", 0)
    assert LABEL_ID["sidewalk"] not in d.labels and (d.labels == IGNORE).any()  # pedestrians are not annotated


def test_lidar_scans_have_intensity_but_no_colour_and_cameras_the_reverse():
    lidar, camera = make_scan("C", 0), make_scan("A", 0)
    assert (
        lidar.rgb is None and lidar.intensity is not None and 0 <= lidar.intensity.min() <= lidar.intensity.max() <= 1
    )
    assert camera.intensity is None and camera.rgb is not None and camera.rgb.dtype == np.uint8
    feats = point_features(lidar.xyz, lidar.rgb, lidar.intensity)
    assert feats.shape == (len(lidar), 5) and (feats[:, :3] == 0).all() and feats[:, 4].min() == 0


def test_the_zero_shot_lidar_sees_from_a_taller_mount_than_the_seen_ones():
    # The lowest ring reaches the road closer to the car on a lower mount: the zero-shot scan
    # (2.6 m, 128 beams) differs in geometry, not only in labels.
    assert DATASETS["E"].sensor_args["mount_height"] > 1.8 and DATASETS["E"].sensor_args["beams"] == 128
    assert DATASETS["E"].zero_shot and DATASETS["F"].zero_shot and not DATASETS["A"].zero_shot


def test_indoor_scans_stay_inside_the_room():
    rng = np.random.default_rng(1)
    room = scenes.room(rng)
    scan = sensors.panorama(room, rng)
    x0, _, x1, y1 = room.bounds
    assert scan.xyz[:, 0].min() >= x0 and scan.xyz[:, 0].max() <= x1 and scan.xyz[:, 1].max() <= y1


def test_grid_sampling_maps_every_point_to_a_kept_point_in_its_own_voxel():
    xyz = np.random.default_rng(0).uniform(0, 1, (5000, 3)).astype(np.float32)
    keep, inverse = grid_sample(xyz, 0.1)
    assert len(keep) < len(xyz) and inverse.shape == (5000,)
    cell = np.floor((xyz - xyz.min(0)) / 0.1)
    assert (cell[keep[inverse]] == cell).all()


def test_a_survey_is_the_single_scans_street_seen_from_spots_along_the_road():
    from mlcore.pointcloud.datasets import make_survey

    single, survey = make_scan("D", 3), make_survey("D", 3, positions=4)
    assert len(survey) > 3 * len(single) and survey.rgb is None and survey.intensity is not None
    # The same street: what the single scan sees of each class, the survey sees too, and nothing else.
    assert set(np.unique(single.labels)) <= set(np.unique(survey.labels)) <= set(DATASETS["D"].class_ids) | {IGNORE}
    # Spots spread over 50 m of road: the survey reaches further along the street than one scan.
    assert np.ptp(survey.xyz[:, 0]) > np.ptp(single.xyz[:, 0])
    with pytest.raises(ValueError, match="only streets are surveyed"):
        make_survey("A", 0)


def test_the_survey_loader_makes_every_kth_street_a_survey_and_leaves_rooms_and_validation_alone():
    from mlcore.pointcloud.pipeline import survey_loader

    load = survey_loader(0.5)
    assert len(load("C", 0, "train")) > 2 * len(make_scan("C", 0, "train"))  # index 0: a survey
    assert np.array_equal(load("C", 1, "train").xyz, make_scan("C", 1, "train").xyz)
    assert np.array_equal(load("C", 0, "val").xyz, make_scan("C", 0, "val").xyz)
    assert np.array_equal(load("A", 0, "train").xyz, make_scan("A", 0, "train").xyz)
