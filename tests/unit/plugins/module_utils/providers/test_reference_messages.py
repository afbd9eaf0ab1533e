"""Issue 24 item 4: a refused image reference or ID names the part that is wrong and why, and the format."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, azure, base, gce

SUB = "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.Compute/"


@pytest.mark.parametrize("parse,reference,part", [
    (gce.parse_image, "projects/p1/global/images/node-v2", "the project ID 'p1' is 2 characters long"),
    (gce.parse_image, "projects/my_project/global/images/a", "the project ID 'my_project' holds '_'"),
    (gce.parse_image, "projects/my-project/global/image/a", "segment 4 is 'image' where 'images' is expected"),
    (gce.parse_image, "projects/my-project/global/images/Node", "the image name 'Node' starts with 'N'"),
    (gce.parse_image, "projects/my-project/global/images", "it ends after 'projects/my-project/global/images'"),
    (gce.parse_group_id, "projects/my-project/zones/us-central1/instanceGroupManagers/w",
     "the zone 'us-central1' is not a GCE zone"),
    (gce.parse_provider_id, "gce://p1/us-central1-a/n1", "the project ID 'p1' is 2 characters long"),
    (azure.parse_image, SUB + "gallery/g/images/i/versions/1", "segment 8 is 'gallery' where 'galleries' is expected"),
    (azure.parse_image, SUB + "galleries/g/images/i/versions/latest", "its version is 'latest'"),
    (azure.parse_image, "Canonical:ubuntu:22_04-lts", "this one has 3"),
    (azure.parse_image, "node-v2", "neither a resource ID"),
    (azure.parse_group_id, SUB + "virtualMachineScaleSet/x", "segment 8 is 'virtualMachineScaleSet'"),
    (aws.validate_image_reference, "ami-123", "its ID part '123' has 3 hex digits, not 8 or 17"),
    (aws.validate_image_reference, "img-12345678", "it starts with 'img', not ami-"),
    (aws.validate_image_reference, "ami-1234567G", "holds 'G', which is not a lower-case hex digit"),
])
def test_a_refused_reference_names_the_part_and_why(parse, reference, part):
    with pytest.raises(base.InvalidReferenceError) as info:
        parse(reference)
    assert repr(reference) in str(info.value) and part in str(info.value)
    assert "expected" in str(info.value)


@pytest.mark.parametrize("parse,reference", [
    (gce.parse_image, "projects/my-project/global/images/node-v2"),
    (gce.parse_image, "projects/123456/global/images/family/node"),
    (azure.parse_image, SUB + "galleries/g/images/i/versions/1.0.0"),
    (aws.validate_image_reference, "ami-0abcdef1234567890"),
])
def test_a_good_reference_is_accepted(parse, reference):
    parse(reference)


def test_the_role_check_names_the_variable_and_the_provider():
    [problem] = validate.role_image_problems({"rolling_upgrade_image": "projects/p/global/images/x",
                                              "rolling_upgrade_provider": "gcp"})
    assert problem.startswith("rolling_upgrade_image is not a gcp image reference") and "'p' is 1 character" in problem
    assert validate.role_image_problems({"rolling_upgrade_image": "ami-0abcdef1234567890",
                                         "rolling_upgrade_provider": "aws"}) == []
    assert validate.role_image_problems({"rolling_upgrade_image": "ami-1", "rolling_upgrade_provider": "nope"}) == []
