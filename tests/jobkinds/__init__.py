"""Job kinds that exist only for tests (registered through ``MOELAB_EXTRA_KINDS``)."""
