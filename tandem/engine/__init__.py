"""tandem's SGLang-API inference engine: HTTP layer (api), core contract (core), backends (embedded, sim)."""
