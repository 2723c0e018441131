"""Shared fixtures for the whole suite. ``built_image`` (tests/image_build.py) is the one
real Debian 12 image build of a session; tests/image and the VM tests both use it."""

from image_build import built_image

__all__ = ["built_image"]
