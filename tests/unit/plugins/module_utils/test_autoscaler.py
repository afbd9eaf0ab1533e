from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.autoscaler import desired_change


def test_pause_remembers_the_replicas_and_scales_to_zero():
    assert desired_change(3, None, "paused") == (0, "3")


def test_pause_of_a_deployment_at_zero_remembers_zero():
    assert desired_change(0, None, "paused") == (0, "0")


def test_pause_again_keeps_the_first_remembered_value():
    assert desired_change(0, "3", "paused") is None
    # someone scaled it up meanwhile: back to zero, still remembering the original count
    assert desired_change(2, "3", "paused") == (0, "3")


def test_restore_uses_the_remembered_value_and_drops_the_annotation():
    assert desired_change(0, "3", "restored") == (3, None)


def test_restore_without_a_remembered_value_changes_nothing():
    assert desired_change(2, None, "restored") is None
