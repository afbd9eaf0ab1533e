"""upgrade_abort's option checks (abort.option_problems), before anything is contacted."""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import abort


def test_etcd_tls_files_that_cannot_be_read_are_named_and_no_etcd_option_is_no_problem(tmp_path):
    readable = tmp_path / "ca.crt"
    readable.write_text("x")
    params = {"annotation_prefix": "image-upgrade.kubenodes.io", "etcd": None}
    assert abort.option_problems(params) == []
    params["etcd"] = {"ca_cert": str(readable), "client_cert": str(tmp_path / "missing.crt"), "client_key": str(readable)}
    assert abort.option_problems(params) == ["etcd.client_cert %s does not exist or is not a file" % (tmp_path / "missing.crt")]
    params["etcd"]["client_cert"] = str(readable)
    assert abort.option_problems(params) == []
