"""MoGA attention, the video DiT (dense / DiT-MoE / ProMoE FFN), its pipeline, judge, media and zoo recipes."""
