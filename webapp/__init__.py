"""MoE Lab's Django project: accounts, jobs and the dashboard."""
