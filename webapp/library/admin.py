from django.contrib import admin

from webapp.library.models import ChunkedUpload, LibraryItem, LibraryUse


class LibraryUseInline(admin.TabularInline):
    model = LibraryUse
    extra = 0
    readonly_fields = ["job", "param", "sha256", "created_at"]


@admin.register(LibraryItem)
class LibraryItemAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "kind", "team", "status", "size", "source", "added_by", "created_at"]
    list_filter = ["status", "kind", "source"]
    search_fields = ["name", "sha256", "team__name"]
    list_select_related = ["team", "added_by"]
    # Content-describing fields never change after validation: the item is immutable.
    readonly_fields = ["sha256", "size", "format", "file", "worker_path", "card", "produced_by"]
    inlines = [LibraryUseInline]


@admin.register(ChunkedUpload)
class ChunkedUploadAdmin(admin.ModelAdmin):
    list_display = ["id", "filename", "team", "user", "received", "size", "updated_at"]
