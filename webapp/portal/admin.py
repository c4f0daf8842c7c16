from django.contrib import admin

from webapp.portal.models import KeyAuditEntry, SharedImage, WatermarkKey


@admin.register(WatermarkKey)
class WatermarkKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "public_id", "team", "num_bits", "created_at", "revoked_at")
    list_filter = ("team",)
    # The sealed bits stay out of the admin too: nobody needs to read a key.
    exclude = ("sealed_bits",)
    readonly_fields = ("public_id", "num_bits", "created_at")


@admin.register(KeyAuditEntry)
class KeyAuditEntryAdmin(admin.ModelAdmin):
    """Read-only: an audit log that staff could edit would prove nothing."""

    list_display = ("at", "team", "action", "key_name", "key_public_id", "actor_name")
    list_filter = ("action", "team")

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(SharedImage)
class SharedImageAdmin(admin.ModelAdmin):
    list_display = ("sha256", "verdict", "organisation", "created_at")
