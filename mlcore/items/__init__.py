"""Item kinds: the models and datasets that jobs take and teams keep in their library, declared
once here as job kinds are in :mod:`mlcore.jobs` (``docs/architecture.md``, "The item-kind
contract"). :mod:`~mlcore.items.registry` lists them, :mod:`~mlcore.items.checks` validates an item
and writes its card. Django-free; importing the registry imports no torch."""
