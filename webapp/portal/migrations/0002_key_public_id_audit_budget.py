"""Opaque key ids (existing keys get a random one), the key audit log and the daily match budgets."""

import secrets

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import webapp.portal.models


def give_existing_keys_opaque_ids(apps, schema_editor) -> None:
    WatermarkKey = apps.get_model("portal", "WatermarkKey")
    for key in WatermarkKey.objects.filter(public_id__isnull=True).only("pk"):
        key.public_id = secrets.token_urlsafe(12)
        key.save(update_fields=["public_id"])


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("portal", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # Three steps, as Django's guide for adding a unique field to existing rows: nullable, filled, unique.
        migrations.AddField(
            model_name="watermarkkey",
            name="public_id",
            field=models.CharField(editable=False, max_length=32, null=True),
        ),
        migrations.RunPython(give_existing_keys_opaque_ids, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="watermarkkey",
            name="public_id",
            field=models.CharField(
                default=webapp.portal.models.new_public_id, editable=False, max_length=32, unique=True
            ),
        ),
        migrations.CreateModel(
            name="MatchBudget",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("scope", models.CharField(max_length=200)),
                ("day", models.DateField()),
                ("used", models.PositiveIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("scope", "day"), name="one_match_budget_per_scope_day")
                ],
            },
        ),
        migrations.CreateModel(
            name="KeyAuditEntry",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("key_public_id", models.CharField(max_length=32)),
                ("key_name", models.CharField(max_length=100)),
                (
                    "action",
                    models.CharField(
                        choices=[("created", "created"), ("rotated", "rotated"), ("revoked", "revoked")],
                        max_length=16,
                    ),
                ),
                ("replacement_public_id", models.CharField(blank=True, max_length=32)),
                ("actor_name", models.CharField(blank=True, max_length=150)),
                ("at", models.DateTimeField(auto_now_add=True)),
                (
                    "actor",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "key",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="portal.watermarkkey",
                    ),
                ),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="key_audit", to="accounts.team"
                    ),
                ),
            ],
            options={
                "ordering": ["-at", "-pk"],
                "indexes": [models.Index(fields=["team", "-at"], name="key_audit_team_at")],
            },
        ),
    ]
