from django.contrib import admin

from webapp.portal.models import SharedImage, WatermarkKey


@admin.register(WatermarkKey)
class WatermarkKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "team", "num_bits", "created_at", "revoked_at")
    list_filter = ("team",)
    # The sealed bits stay out of the admin too: nobody needs to read a key.
    exclude = ("sealed_bits",)
    readonly_fields = ("num_bits", "created_at")


@admin.register(SharedImage)
class SharedImageAdmin(admin.ModelAdmin):
    list_display = ("sha256", "verdict", "organisation", "created_at")
