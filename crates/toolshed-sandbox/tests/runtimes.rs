//! Python and Node run inside the sandbox, with the minimal root and synthetic /etc.
#![allow(clippy::unwrap_used)]

mod common;

use common::{out, py, require, sandbox, show};
use toolshed_sandbox::{LimitsRequest, RunSpec};

#[tokio::test]
async fn python_runs_inside_the_sandbox() {
    let sb = sandbox();
    let code = "import json, sys, getpass, tempfile, os\n\
                data = json.load(sys.stdin)\n\
                with tempfile.NamedTemporaryFile(dir='/tmp') as f:\n    pass\n\
                print(json.dumps({'echo': data, 'user': getpass.getuser(), 'cwd': os.getcwd(), 'v': sys.version_info[0]}))";
    let code = code.replace("                ", "");
    let o = sb
        .run(
            py(&code, LimitsRequest::default()),
            br#"{"order_id": "ORD-1"}"#.to_vec(),
        )
        .await
        .unwrap();
    assert!(o.success(), "{}", show(&o));
    let v: serde_json::Value = serde_json::from_str(out(&o).trim()).unwrap();
    assert_eq!(v["echo"]["order_id"], "ORD-1");
    assert_eq!(v["user"], "sandbox");
    assert_eq!(v["cwd"], "/work");
    assert_eq!(v["v"], 3);
}

#[tokio::test]
async fn node_runs_inside_the_sandbox() {
    let sb = sandbox();
    let node = require("node", "nodejs");
    let spec = RunSpec::new(
        node,
        [
            "-e",
            "const os = require('os'); let s = ''; process.stdin.on('data', d => s += d).on('end', () => console.log(JSON.stringify({echo: JSON.parse(s), user: os.userInfo().username, cpus: os.cpus().length > 0})))",
        ],
    );
    let o = sb.run(spec, br#"{"n": 7}"#.to_vec()).await.unwrap();
    assert!(o.success(), "{}", show(&o));
    let v: serde_json::Value = serde_json::from_str(out(&o).trim()).unwrap();
    assert_eq!(v["echo"]["n"], 7);
    assert_eq!(v["user"], "sandbox");
    assert_eq!(v["cpus"], true);
}
