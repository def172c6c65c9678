"""What a ServingStack chooses between, and the defaults the API shares with the catalog.

A leaf: the API models and the catalog both import it and it imports
neither. Each component's pinned version lives in its own catalog module
(``modelplane.catalog.components.<name>.VERSION``).

The requirements document (the newer, main-branch one) decides where it and
the CRD reference disagree; see ../shared/spec/README.md.
"""

from enum import StrEnum


class Stack(StrEnum):
    STANDARD = "Standard"
    DYNAMO = "Dynamo"


class ComponentsMode(StrEnum):
    MANAGED = "Managed"
    PROVIDED = "Provided"


GATEWAY_CLASS_NAME = "envoy"
NVIDIA_DRIVER_ROOT = "/"
