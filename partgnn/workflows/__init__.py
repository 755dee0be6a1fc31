"""Whole workflows as library calls returning records: a shipped model evaluated on events of
one's own (:mod:`pretrained_evaluation`), and the exactness check of partitioned training on the
launched processes (:mod:`selfcheck`). The ``partgnn`` commands print what they return."""
