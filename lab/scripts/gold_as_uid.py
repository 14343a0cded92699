"""Grade gold patches with the eval script run as uid 1000 (runtime.command_user=1000): do the suites allow it?

Usage: .venv/bin/python lab/scripts/gold_as_uid.py INSTANCE_ID ...
(reports under $TMPDIR/pinpoint-gold-as-uid/<id>/; figures in docs/security.md)
"""
import sys
import tempfile
from pathlib import Path

from pinpoint.environments.runtime import RuntimeSettings
from pinpoint.swebench_eval.datasets import default_dataset, load_instances
from pinpoint.swebench_eval.evaluate import evaluate_patch
from pinpoint.swebench_eval.images import build_instance_image
from pinpoint.swebench_eval.runtime import instance_runtime

rows = {i.instance_id: i for i in load_instances(str(default_dataset()))}
for iid in sys.argv[1:]:
    row = rows[iid]
    tag = build_instance_image(row).tag
    rt = instance_runtime(row, tag, RuntimeSettings(command_user="1000"))
    try:
        v = evaluate_patch(row, row.patch, runtime=rt, out_dir=Path(tempfile.gettempdir()) / "pinpoint-gold-as-uid" / iid)
    finally:
        rt.close()
    st = v.report[iid].get("tests_status", {})
    print(iid, v.outcome, {k: len(g.get("failure", [])) for k, g in st.items() if k in ("FAIL_TO_PASS", "PASS_TO_PASS")},
          "failing:", [t for k in ("FAIL_TO_PASS", "PASS_TO_PASS") for t in st.get(k, {}).get("failure", [])][:5], flush=True)
