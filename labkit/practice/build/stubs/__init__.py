"""The stubs handed to the learner: each copied once to ``<notebook folder>/build/`` by ``build.open_stub``."""
