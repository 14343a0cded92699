"""The FLARE lab: the corpora and examples the diagnostic model trains on, its training and evaluation, and the
`pinpoint-lab bench` modules that measure every localization signal."""
