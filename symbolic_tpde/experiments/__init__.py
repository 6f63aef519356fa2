"""Experiments built on the library: the authors' preset (``castin2025*``), the figure families
(``figures*``), rank resolution, the stability, masked and mean-field chaos studies.  Nothing in the library
(``analysis`` and below) imports this package."""
