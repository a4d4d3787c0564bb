"""Everything that reads or writes outside the process: the results layout (:mod:`~headstats.io.store`,
its only owner), models (:mod:`~headstats.io.models`), embedded assets (:mod:`~headstats.io.assets`),
benchmark tasks and collection sources (:mod:`~headstats.io.tasks`)."""
