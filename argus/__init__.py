"""Argus: a verified tile DSL for NVIDIA Hopper (sm_90a). Users write `import argus as ag`."""
