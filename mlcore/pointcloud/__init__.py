"""Point clouds: the validating front door (IO), the PTv3-lite backbone with Point-MoE, procedural
multi-sensor scenes, chunked segmentation and thumbnails."""
