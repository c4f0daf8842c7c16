"""A held-out procedural scene family for testing point-cloud segmenters beyond their training generator.

SynMix (:mod:`mlcore.pointcloud.scenes`, ``sensors``, ``datasets``) trains the zoo segmenters. This
package is a second, independent family written only to **test** them: it imports nothing from
SynMix's generator (a test walks the imports), only numpy and the master label space with its coarse
taxonomy (:mod:`mlcore.pointcloud.labels`). It is never used to select or tune a model, and its
parameters (``parameters.json``) were fixed before its first evaluation; a test pins their sha256.

What differs from SynMix, by design:

- **scenes** (:mod:`.rooms`, :mod:`.streets`): L-shaped rooms, doors with casings, windows with
  boards and radiators, shelves full of books, sofas, beds, round tables, desks, office chairs and
  stools at any angle; streets with curbs and raised sidewalks, facades with recessed windows,
  balconies and cornices, street lights with arms, traffic signs, bollards, fences, hedges, trees of
  trunk, branches and crown blobs, walking people, sedans, vans, buses and bicycles;
- **solids** (:mod:`.shapes`): boxes at any yaw, cylinders along any axis, ellipsoids;
- **sensors** (:mod:`.scanners`): surface sampling (mesh-like rooms, a mobile mapping street) with
  anisotropic and range-dependent noise, outliers, holes and varying density, and ray casting of
  its own (a tripod laser scanner indoors, a 40-beam LiDAR with beams crowded at the horizon);
- **materials** (:mod:`.appearance`): colours from albedo and lamps, windows or sun; intensity from
  near-infrared reflectance.

Fine labels are SynMix's master classes (sofas and beds → ``chair``, bicycles → ``car``, fences →
``building``, rugs → ``floor``, books, plants, pictures → ``clutter``; the modules say why), coarse
labels follow :data:`mlcore.pointcloud.labels.COARSE_OF`. :mod:`.evaluate` writes each scan in every
encoding and segments the files the way the ``pointcloud-segment`` job does; it is the one module
here that imports the segmenter (and through it SynMix's code), and it makes no scene of its own.
"""

from bench.heldout_scenes.scans import DECLARED_COARSE, KIND_LABELS, HeldoutScan, make_scan, specs, tier_scans

__all__ = ["DECLARED_COARSE", "KIND_LABELS", "HeldoutScan", "make_scan", "specs", "tier_scans"]
