"""Measures: initial laws, empirical moments and estimators, Wasserstein and Bures distances."""
