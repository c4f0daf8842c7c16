"""MoGA attention, the video DiT (dense / DiT-MoE / ProMoE / EC-DiT / Race-DiT FFN), its pipeline,
judge, media and zoo recipes."""
