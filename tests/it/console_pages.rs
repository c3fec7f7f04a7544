//! The console's tasks, limits and server pages in a real browser, as an agent signed in with
//! its token and as the operator the kernel names: a real task cancelled from the page by each,
//! a rate-limited agent's limits, and the history of a server that fails at start, all live.

use std::os::unix::fs::MetadataExt;

use serde_json::json;
use toolhost::api::pb;
use toolhost::listen::BoundAddr;
use toolhost::registry::ServerState;

use crate::console::Browser;
use crate::harness::*;

const VIEWER_TOKEN: &str = "limited-viewer-token-0123456789";

/// A task whose call runs ten minutes: it is cancelled long before.
fn start_sleep() -> pb::StartTaskRequest {
    let arguments = json!({"ms": 600_000}).to_string();
    pb::StartTaskRequest {
        call: Some(pb::CallToolRequest { qualified_name: "demo__sleep".into(), arguments_json: arguments, ..Default::default() }),
        ttl_ms: 0,
    }
}

fn echo() -> pb::CallToolRequest {
    pb::CallToolRequest { qualified_name: "demo__echo".into(), arguments_json: r#"{"text":"hi"}"#.into(), ..Default::default() }
}

/// `[console]` on a loopback port and `[access]`: the browser's user (this process's) as the
/// operator, first, then the token agent `agent` with `settings`; its token file is written.
fn sections(dir: &TestDir, agent: &str, settings: &str) -> String {
    std::fs::write(dir.path("agent.token"), VIEWER_TOKEN).unwrap();
    let uid = std::fs::metadata(dir.path("")).unwrap().uid();
    format!(
        "[console]\nlisten = [\"127.0.0.1:0\"]\n\n[access]\ndefault = \"deny\"\n\n\
         [[access.agents]]\nname = \"operator\"\nuids = [{uid}]\nallow = [\"*\"]\nadmin = true\n\n\
         [[access.agents]]\nname = \"{agent}\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"demo__*\"]\n{settings}\n",
        dir.path("agent.token").display()
    )
}

/// The console's address.
fn console_base(app: &toolhost::app::App) -> String {
    let port = app.console_addrs().iter().find_map(|addr| match addr {
        BoundAddr::Tcp(socket) => Some(socket.port()),
        BoundAddr::Unix(_) => None,
    });
    format!("http://127.0.0.1:{}", port.expect("the console listens on TCP"))
}

async fn count(browser: &mut Browser, selector: &str) -> u64 {
    browser.eval(&format!("document.querySelectorAll({selector:?}).length")).await.as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_limits_and_a_failing_servers_history_as_an_agent_and_as_the_operator() {
    let dir = TestDir::new();
    // The viewer's token, once signed in with, decides instead of the kernel's word.
    let sections = sections(
        &dir,
        "viewer",
        "rate = { calls = 3, per = \"1h\", burst = 3 }\nquota = { tools = [\"demo__echo\"], calls = 5, per = \"1d\" }",
    );
    let failing = dir.path("failing.py");
    std::fs::write(&failing, "import sys\nsys.stderr.write('cannot read settings.json\\n')\nsys.exit(2)\n").unwrap();
    let servers = [
        server_table("demo", &dir.script("demo", json!({})), ""),
        format!(
            "[servers.failing]\ncommand = \"/usr/bin/python3\"\nargs = [{:?}]\nrestart = {{ initial_backoff = \"1s\", max_backoff = \"3s\" }}\n",
            failing.display().to_string()
        ),
    ];
    let app = start(dir.config_with(&sections, &servers.join("\n"))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let base = console_base(&app);

    // The viewer: two tasks working, a call, then a call refused by its rate (3 an hour).
    let mut viewer = agent_client(&app, VIEWER_TOKEN).await;
    let first = viewer.start_task(start_sleep()).await.unwrap().into_inner().task_id;
    let second = viewer.start_task(start_sleep()).await.unwrap().into_inner().task_id;
    // And one of the operator's own, which the viewer must not reach.
    let theirs = client(&app).await.start_task(start_sleep()).await.unwrap().into_inner().task_id;
    eventually("the three tasks' calls are at the server", async || {
        (app.registry().server("demo").unwrap().shared().call_queue.in_use() == 3).then_some(())
    })
    .await;
    viewer.call_tool(echo()).await.unwrap();
    let refused = viewer.call_tool(echo()).await.unwrap_err();
    assert_eq!(error_info(&refused).0, "RATE_LIMITED");

    let Some(mut browser) = Browser::launch().await else { return };
    browser.open(&format!("{base}/login")).await;
    browser.run(json!({"op": "fill", "selector": "#token", "value": VIEWER_TOKEN})).await;
    browser.run(json!({"op": "click", "selector": "form.login button"})).await;

    // Its own tasks, no agent column, a Cancel on each working one.
    browser.run(json!({"op": "click", "selector": "nav a[href='/tasks']"})).await;
    browser.wait(&format!("tr[data-task='{first}'][data-status=working]"), None).await;
    assert_eq!(count(&mut browser, "tr[data-task]").await, 2);
    assert_eq!(count(&mut browser, "table.tasks th").await, 7, "an agent's own tasks need no agent column");
    let cancelled = browser.run(json!({"op": "click", "selector": format!("tr[data-task='{first}'] button")})).await;
    assert!(cancelled["url"].as_str().unwrap().ends_with("/tasks"), "{cancelled}");
    let flash = browser.wait("p.flash", None).await;
    assert!(flash.contains(&first) && flash.contains("demo__sleep"), "{flash}");
    let message = browser.wait(&format!("tr[data-task='{first}'][data-status=cancelled]"), None).await;
    assert!(message.contains("cancelled by its caller"), "{message}");
    browser.screenshot("tasks").await;
    // Another agent's task, posted by id with this session's own CSRF token: not found.
    let status = browser
        .eval(&format!(
            "fetch('/tasks/cancel', {{ method: 'POST', headers: {{ 'content-type': 'application/x-www-form-urlencoded' }}, \
             body: 'csrf=' + encodeURIComponent(document.querySelector('input[name=csrf]').value) + '&id={theirs}' }}).then(r => r.status)"
        ))
        .await;
    assert_eq!(status, json!(404), "a task of someone else's does not exist for the viewer");
    browser.errors().await;

    // Its limits only: the rate used up (the next call in about 20 minutes), a quota counted,
    // the refusal among the recent calls (the trail is written behind the calls: the page
    // follows).
    browser.run(json!({"op": "click", "selector": "nav a[href='/limits']"})).await;
    assert_eq!(count(&mut browser, "tr[data-agent]").await, 1, "an agent sees its own limits only");
    let rate = browser.wait("tr[data-agent=viewer] td.rate", None).await;
    assert!(rate.contains("3 per 1h") && rate.contains("next call in"), "{rate}");
    let quota = browser.wait("tr[data-agent=viewer] td.quotas", None).await;
    assert!(quota.contains("demo__echo") && quota.contains("1 of 5 used") && quota.contains("4 left"), "{quota}");
    browser.wait("tr[data-agent=viewer] td.in-flight", Some("1 of 1024")).await;
    browser.wait("tr[data-agent=viewer] td.recent", Some("1 by its limits")).await;
    browser.wait("tr[data-server=demo] td.running", Some("2")).await;
    browser.screenshot("limits").await;

    // Signed out, the kernel's word: the operator sees every agent's tasks, filters, cancels.
    browser.run(json!({"op": "click", "selector": "form[action='/logout'] button"})).await;
    browser.open(&format!("{base}/tasks")).await;
    browser.wait("table.tasks th", Some("agent")).await;
    browser.eval("(() => { document.querySelector('select[name=agent]').value = 'viewer'; document.querySelector('select[name=state]').value = 'working'; return 1; })()").await;
    let filtered = browser.run(json!({"op": "click", "selector": "form.filters button"})).await;
    assert!(filtered["url"].as_str().unwrap().contains("agent=viewer&state=working"), "{filtered}");
    assert_eq!(count(&mut browser, "tr[data-task]").await, 1, "only the working task");
    browser.run(json!({"op": "click", "selector": format!("tr[data-task='{second}'] button")})).await;
    browser.open(&format!("{base}/tasks?state=cancelled")).await;
    let by_operator = browser.wait(&format!("tr[data-task='{second}'][data-status=cancelled]"), None).await;
    assert!(by_operator.contains("cancelled by operator operator") && by_operator.contains("viewer"), "{by_operator}");
    assert_eq!(count(&mut browser, "tr[data-task]").await, 2);
    // The viewer's own client sees the operator's cancellation as the task's end.
    let seen = viewer.get_task(pb::TaskRequest { task_id: second.clone() }).await.unwrap().into_inner();
    assert_eq!(seen.status, pb::TaskStatus::Cancelled as i32, "{seen:?}");
    eventually("the cancelled calls left the server's queue", async || {
        (app.registry().server("demo").unwrap().shared().call_queue.in_use() == 1).then_some(())
    })
    .await;
    let wanted = format!("task_cancelled:{second}:viewer");
    eventually("the operator's cancellation is in the trail", async || {
        let trail = client(&app).await.query_audit(pb::QueryAuditRequest { limit: 100, ..Default::default() }).await.unwrap().into_inner();
        trail.records.iter().find(|record| record.outcome == wanted).map(|record| assert_eq!(record.agent, "operator"))
    })
    .await;
    let mine = client(&app).await.get_task(pb::TaskRequest { task_id: theirs }).await.unwrap().into_inner();
    assert_eq!(mine.status, pb::TaskStatus::Working as i32, "the operator's own task still runs");
    browser.open(&format!("{base}/limits")).await;
    assert_eq!(count(&mut browser, "tr[data-agent]").await, 2, "an operator sees every entry");
    browser.wait("tr[data-agent=viewer] td.in-flight", Some("0 of 1024")).await;

    // The failing server's page: its history fills in live as it exits and is restarted.
    browser.open(&format!("{base}/server?name=failing")).await;
    browser.wait("table.history td", Some("exited with status 2")).await;
    browser.wait("table.history td", Some("restart 2")).await;
    let history = browser.wait("table.history", None).await;
    assert!(history.contains("cannot read settings.json") && history.contains("configured"), "{history}");
    browser.screenshot("server-history").await;
    let errors = browser.errors().await;
    assert!(errors.is_empty(), "{errors:?}");
    browser.close().await;
    app.shutdown().await;
}

/// An operator approves and denies calls on the approvals page: the arguments are shown as data
/// (markup an agent sent stays text), the definition beside them; the approved call runs once,
/// the denied one carries the reason typed, and a reason being typed survives the page's refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_approves_and_denies_calls_in_the_browser() {
    let dir = TestDir::new();
    // The calls wait for the browser's decision within their deadline (`answer_after` long).
    let sections = format!("[approvals]\nanswer_after = \"10m\"\n{}", sections(&dir, "bot", "approve = [\"demo__echo\"]"));
    let app = start(dir.config_with(&sections, &server_table("demo", &dir.script("demo", json!({})), ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let base = console_base(&app);
    let payload = "<img src=x onerror=\"window.__pwned=1\"> pay 10";
    let ask = async |text: &str| {
        let call = pb::CallToolRequest {
            qualified_name: "demo__echo".into(),
            arguments_json: json!({"text": text}).to_string(),
            ..Default::default()
        };
        let mut request = tonic::Request::new(call);
        request.set_timeout(std::time::Duration::from_secs(120));
        (agent_client(&app, VIEWER_TOKEN).await, request)
    };
    let (mut bot, request) = ask(payload).await;
    let first = tokio::spawn(async move { bot.call_tool(request).await });

    let Some(mut browser) = Browser::launch().await else { return };
    browser.open(&format!("{base}/servers")).await;
    browser.run(json!({"op": "click", "selector": "nav a[href='/approvals']"})).await;
    let shown = browser.wait("section[data-approval] pre.arguments", Some("pay 10")).await;
    assert!(shown.contains("<img src=x"), "the arguments, as text: {shown}");
    assert_eq!(browser.eval("window.__pwned === undefined && document.querySelectorAll('#live img').length === 0").await, json!(true));
    let definition = browser.wait("section[data-approval] div.side-by-side", None).await;
    assert!(definition.contains("inputSchema"), "the definition beside the arguments: {definition}");
    browser.screenshot("approvals").await;
    let approved = browser.run(json!({"op": "click", "selector": "section[data-approval] button[value=approve]"})).await;
    assert!(approved["url"].as_str().unwrap().ends_with("/approvals"), "{approved}");
    assert!(browser.wait("p.flash", None).await.contains("Approved demo__echo for bot"));
    let result = first.await.unwrap().unwrap().into_inner();
    assert!(result.content_json.contains("pay 10"), "{result:?}");

    // A second call; the reason typed survives the page's refreshes; a denial without one is refused.
    let (mut bot, request) = ask("pay 99").await;
    let second = tokio::spawn(async move { bot.call_tool(request).await });
    browser.wait("section[data-approval] pre.arguments", Some("pay 99")).await;
    let refused = browser.run(json!({"op": "click", "selector": "section[data-approval] button[value=deny]"})).await;
    assert_eq!(refused["status"], json!(400), "{refused}");
    browser.errors().await;
    browser.open(&format!("{base}/approvals")).await;
    browser.run(json!({"op": "fill", "selector": "section[data-approval] input[name=reason]", "value": "not a known payee"})).await;
    // Two of the page's refreshes go by: the page fetches one at a time, so when the third
    // starts the first two have ended (and swapped, or not). The field keeps what was typed.
    browser
        .eval(
            "new Promise(resolve => { let started = 0; const fetch = window.fetch; \
             window.fetch = function (...args) { started += 1; if (started === 3) { resolve(); } return fetch.apply(this, args); }; })",
        )
        .await;
    let kept = browser.eval("document.querySelector('section[data-approval] input[name=reason]').value").await;
    assert_eq!(kept, json!("not a known payee"));
    browser.run(json!({"op": "click", "selector": "section[data-approval] button[value=deny]"})).await;
    let denied = second.await.unwrap().unwrap_err();
    let (reason, details) = error_info(&denied);
    assert_eq!((reason.as_str(), details["reason"].as_str()), ("APPROVAL_DENIED", "not a known payee"));
    browser.wait("table.approvals tr[data-status=denied]", Some("not a known payee")).await;
    let errors = browser.errors().await;
    assert!(errors.is_empty(), "{errors:?}");
    browser.close().await;
    app.shutdown().await;
}
