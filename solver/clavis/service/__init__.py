"""clavisd, the head-node service: store, REST API, ingest, classification, repacking, plans."""
