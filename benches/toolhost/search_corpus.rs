//! A relevance test set for tool search: tools as well-known MCP servers describe them
//! (filesystem, git, GitHub, memory, fetch, time, SQLite, Slack, Puppeteer, Brave search, maps,
//! server-everything), hidden among synthetic tools to make 1,000, and 50 queries phrased as an
//! agent would, each with the tool it should find.

use serde_json::{Value, json};

/// (server, tool, description, [(argument, argument description)])
type RealTool = (&'static str, &'static str, &'static str, &'static [(&'static str, &'static str)]);

pub const REAL: &[RealTool] = &[
    ("filesystem", "read_file", "Read the complete contents of a file from the file system.", &[("path", "Path of the file")]),
    ("filesystem", "read_multiple_files", "Read the contents of multiple files simultaneously.", &[("paths", "Paths of the files")]),
    (
        "filesystem",
        "write_file",
        "Create a new file or completely overwrite an existing file with new content.",
        &[("path", ""), ("content", "")],
    ),
    ("filesystem", "edit_file", "Make line-based edits to a text file, replacing exact sequences of text.", &[("path", ""), ("edits", "")]),
    ("filesystem", "create_directory", "Create a new directory or ensure a directory exists.", &[("path", "")]),
    ("filesystem", "list_directory", "Get a detailed listing of all files and directories in a specified path.", &[("path", "")]),
    ("filesystem", "move_file", "Move or rename files and directories.", &[("source", ""), ("destination", "")]),
    ("filesystem", "search_files", "Recursively search for files and directories matching a pattern.", &[("pattern", "Glob pattern")]),
    (
        "filesystem",
        "get_file_info",
        "Retrieve detailed metadata about a file or directory: size, creation time, permissions.",
        &[("path", "")],
    ),
    ("git", "git_status", "Shows the working tree status.", &[("repo_path", "")]),
    ("git", "git_diff_unstaged", "Shows changes in the working directory that are not yet staged.", &[("repo_path", "")]),
    ("git", "git_commit", "Records changes to the repository.", &[("repo_path", ""), ("message", "Commit message")]),
    ("git", "git_add", "Adds file contents to the staging area.", &[("repo_path", ""), ("files", "")]),
    ("git", "git_log", "Shows the commit logs.", &[("repo_path", ""), ("max_count", "")]),
    ("git", "git_create_branch", "Creates a new branch from an optional base branch.", &[("branch_name", ""), ("base_branch", "")]),
    ("git", "git_checkout", "Switches branches.", &[("branch_name", "")]),
    ("github", "create_issue", "Create a new issue in a GitHub repository.", &[("owner", ""), ("repo", ""), ("title", ""), ("body", "")]),
    ("github", "create_pull_request", "Create a new pull request in a GitHub repository.", &[("head", ""), ("base", ""), ("title", "")]),
    ("github", "search_repositories", "Search for GitHub repositories.", &[("query", "Search query")]),
    ("github", "get_file_contents", "Get the contents of a file or directory from a GitHub repository.", &[("owner", ""), ("path", "")]),
    ("github", "fork_repository", "Fork a GitHub repository to your account or specified organization.", &[("owner", ""), ("repo", "")]),
    ("github", "list_commits", "Get list of commits of a branch in a GitHub repository.", &[("sha", "")]),
    ("github", "add_issue_comment", "Add a comment to an existing issue.", &[("issue_number", ""), ("body", "")]),
    ("github", "merge_pull_request", "Merge a pull request.", &[("pull_number", ""), ("merge_method", "")]),
    ("memory", "create_entities", "Create multiple new entities in the knowledge graph.", &[("entities", "")]),
    ("memory", "create_relations", "Create multiple new relations between entities in the knowledge graph.", &[("relations", "")]),
    ("memory", "add_observations", "Add new observations to existing entities in the knowledge graph.", &[("observations", "")]),
    (
        "memory",
        "delete_entities",
        "Delete multiple entities and their associated relations from the knowledge graph.",
        &[("entityNames", "")],
    ),
    ("memory", "search_nodes", "Search for nodes in the knowledge graph based on a query.", &[("query", "")]),
    ("memory", "read_graph", "Read the entire knowledge graph.", &[]),
    (
        "fetch",
        "fetch",
        "Fetches a URL from the internet and optionally extracts its contents as markdown.",
        &[("url", "URL to fetch"), ("max_length", "")],
    ),
    ("time", "get_current_time", "Get current time in a specific timezone.", &[("timezone", "IANA timezone name")]),
    ("time", "convert_time", "Convert time between timezones.", &[("source_timezone", ""), ("time", ""), ("target_timezone", "")]),
    ("sqlite", "read_query", "Execute a SELECT query on the SQLite database.", &[("query", "SELECT SQL query")]),
    ("sqlite", "write_query", "Execute an INSERT, UPDATE, or DELETE query on the SQLite database.", &[("query", "")]),
    ("sqlite", "create_table", "Create a new table in the SQLite database.", &[("query", "CREATE TABLE statement")]),
    ("sqlite", "list_tables", "List all tables in the SQLite database.", &[]),
    ("sqlite", "describe_table", "Get the schema information for a specific table.", &[("table_name", "")]),
    ("slack", "slack_post_message", "Post a new message to a Slack channel.", &[("channel_id", ""), ("text", "")]),
    ("slack", "slack_list_channels", "List public channels in the workspace.", &[("limit", "")]),
    ("slack", "slack_reply_to_thread", "Reply to a specific message thread in Slack.", &[("thread_ts", ""), ("text", "")]),
    ("slack", "slack_add_reaction", "Add a reaction emoji to a message.", &[("reaction", "")]),
    ("puppeteer", "puppeteer_navigate", "Navigate to a URL in the browser.", &[("url", "")]),
    (
        "puppeteer",
        "puppeteer_screenshot",
        "Take a screenshot of the current page or a specific element.",
        &[("name", ""), ("selector", "")],
    ),
    ("puppeteer", "puppeteer_click", "Click an element on the page.", &[("selector", "CSS selector")]),
    ("puppeteer", "puppeteer_fill", "Fill out an input field.", &[("selector", ""), ("value", "")]),
    (
        "brave",
        "brave_web_search",
        "Performs a web search using the Brave Search API, for general queries, news and articles.",
        &[("query", "")],
    ),
    ("brave", "brave_local_search", "Searches for local businesses and places such as restaurants and services.", &[("query", "")]),
    ("maps", "maps_geocode", "Convert an address into geographic coordinates.", &[("address", "")]),
    ("maps", "maps_directions", "Get directions between two points.", &[("origin", ""), ("destination", ""), ("mode", "")]),
    ("everything", "echo", "Echoes back the input.", &[("message", "Message to echo")]),
    ("everything", "add", "Adds two numbers.", &[("a", ""), ("b", "")]),
    (
        "everything",
        "longRunningOperation",
        "Demonstrates a long running operation with progress updates.",
        &[("duration", ""), ("steps", "")],
    ),
    ("everything", "getTinyImage", "Returns the MCP_TINY_IMAGE.", &[]),
];

/// (what an agent might ask for, the qualified name it should find)
pub const QUERIES: &[(&str, &str)] = &[
    ("read a file", "filesystem__read_file"),
    ("read several files at once", "filesystem__read_multiple_files"),
    ("overwrite a file with new content", "filesystem__write_file"),
    ("edit lines in a text file", "filesystem__edit_file"),
    ("make a new folder directory", "filesystem__create_directory"),
    ("list the files in a directory", "filesystem__list_directory"),
    ("rename a file", "filesystem__move_file"),
    ("find files matching a glob pattern", "filesystem__search_files"),
    ("file size and permissions", "filesystem__get_file_info"),
    ("working tree status", "git__git_status"),
    ("unstaged changes diff", "git__git_diff_unstaged"),
    ("commit changes with a message", "git__git_commit"),
    ("stage files", "git__git_add"),
    ("show commit history log", "git__git_log"),
    ("create a branch", "git__git_create_branch"),
    ("switch branch checkout", "git__git_checkout"),
    ("open a github issue", "github__create_issue"),
    ("open a pull request", "github__create_pull_request"),
    ("find repositories on github", "github__search_repositories"),
    ("fork a repository", "github__fork_repository"),
    ("comment on an issue", "github__add_issue_comment"),
    ("merge a pull request", "github__merge_pull_request"),
    ("list commits of a branch", "github__list_commits"),
    ("add entities to the knowledge graph", "memory__create_entities"),
    ("relate two entities", "memory__create_relations"),
    ("record observations about an entity", "memory__add_observations"),
    ("delete entities from memory", "memory__delete_entities"),
    ("search memory nodes", "memory__search_nodes"),
    ("read the whole knowledge graph", "memory__read_graph"),
    ("download a web page url as markdown", "fetch__fetch"),
    ("what time is it in Tokyo timezone", "time__get_current_time"),
    ("convert time between timezones", "time__convert_time"),
    ("run a select sql query", "sqlite__read_query"),
    ("insert rows into the database", "sqlite__write_query"),
    ("create a database table", "sqlite__create_table"),
    ("list database tables", "sqlite__list_tables"),
    ("table schema", "sqlite__describe_table"),
    ("post a slack message", "slack__slack_post_message"),
    ("list slack channels", "slack__slack_list_channels"),
    ("reply in a slack thread", "slack__slack_reply_to_thread"),
    ("react with an emoji", "slack__slack_add_reaction"),
    ("open a url in the browser", "puppeteer__puppeteer_navigate"),
    ("take a screenshot of the page", "puppeteer__puppeteer_screenshot"),
    ("click a button on the page", "puppeteer__puppeteer_click"),
    ("fill in a form field", "puppeteer__puppeteer_fill"),
    ("search the web for news", "brave__brave_web_search"),
    ("find restaurants nearby", "brave__brave_local_search"),
    ("address to coordinates", "maps__maps_geocode"),
    ("driving directions", "maps__maps_directions"),
    ("echo a message back", "everything__echo"),
];

/// The real tools plus synthetic ones (plausible business tools with overlapping vocabulary)
/// until there are `total`, as (server, tool definition).
pub fn catalog(total: usize) -> Vec<(String, Value)> {
    let mut tools: Vec<(String, Value)> = REAL
        .iter()
        .map(|(server, name, description, args)| {
            let properties: serde_json::Map<String, Value> =
                args.iter().map(|(arg, about)| ((*arg).to_owned(), json!({"type": "string", "description": about}))).collect();
            (
                (*server).to_owned(),
                json!({"name": name, "description": description, "inputSchema": {"type": "object", "properties": properties}}),
            )
        })
        .collect();
    // Synthetic tools in the shape of business integrations: 24 verbs, 60 objects, 12 systems
    // and 8 ways of describing them, so that no word is in every description (in a real
    // catalog none is either), while common ones ("get", "list", "record") are in thousands.
    const VERBS: &[&str] = &[
        "get",
        "list",
        "update",
        "delete",
        "create",
        "sync",
        "export",
        "import",
        "archive",
        "approve",
        "assign",
        "close",
        "reopen",
        "merge",
        "split",
        "tag",
        "untag",
        "schedule",
        "cancel",
        "refund",
        "validate",
        "publish",
        "retract",
        "summarize",
    ];
    const NOUNS: &[&str] = &[
        "invoice",
        "customer",
        "ticket",
        "order",
        "shipment",
        "report",
        "user",
        "project",
        "contract",
        "payment",
        "record",
        "asset",
        "campaign",
        "lead",
        "document",
        "note",
        "task",
        "event",
        "account",
        "product",
        "vendor",
        "quote",
        "subscription",
        "coupon",
        "warehouse",
        "employee",
        "timesheet",
        "expense",
        "budget",
        "forecast",
        "opportunity",
        "segment",
        "survey",
        "webhook",
        "license",
        "device",
        "incident",
        "alert",
        "dashboard",
        "metric",
        "milestone",
        "sprint",
        "release",
        "deployment",
        "backup",
        "certificate",
        "domain",
        "mailbox",
        "calendar",
        "meeting",
        "invoice_line",
        "credit_note",
        "refund_request",
        "purchase_order",
        "supplier",
        "catalog_item",
        "price_list",
        "tax_rate",
        "payroll",
        "benefit",
    ];
    const SYSTEMS: &[&str] =
        &["crm", "erp", "helpdesk", "billing", "hr", "inventory", "marketing", "analytics", "support", "sales", "itsm", "finance"];
    const TEMPLATES: &[&str] = &[
        "{Verb} a {noun} in the {system}.",
        "{Verb} one {noun} by its identifier.",
        "{Verb} {noun} entries for the current workspace.",
        "Use this to {verb} a {noun}; it returns the updated {noun}.",
        "{Verb} the {noun} and notify its owner.",
        "Bulk {verb} of {noun} items, up to 500 at a time.",
        "{Verb} a {noun} (requires the {system} admin scope).",
        "{Verb} {noun} data between {system} and the data warehouse.",
    ];
    let mut i = 0;
    while tools.len() < total {
        let verb = VERBS[i % VERBS.len()];
        let noun = NOUNS[(i / VERBS.len()) % NOUNS.len()];
        let system = SYSTEMS[(i / 7) % SYSTEMS.len()];
        let name = format!("{verb}_{noun}_{i}");
        let description = TEMPLATES[(i / 3) % TEMPLATES.len()]
            .replace("{Verb}", &capitalise(verb))
            .replace("{verb}", verb)
            .replace("{noun}", &noun.replace('_', " "))
            .replace("{system}", system);
        let definition = json!({"name": name, "description": description, "inputSchema": {"type": "object",
            "properties": {format!("{noun}_id"): {"type": "string", "description": format!("The {} to {verb}", noun.replace('_', " "))}}}});
        tools.push((system.to_owned(), definition));
        i += 1;
    }
    tools
}

fn capitalise(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}
