//! `leakscope mcp`: a Model Context Protocol server over stdio (the `rmcp` crate) for
//! coding agents. Its tools are the commands: a call is the command line with `--json`,
//! read by the same argument definitions (so each tool's arguments, types, defaults and
//! help are the command's own) and run by the same code, so its result is exactly what
//! `leakscope COMMAND ... --json` prints. Files stay loaded between calls ([`super::kept`]);
//! each is also a resource holding its `summary`.

use std::borrow::Cow;
use std::ffi::OsString;
use std::sync::Arc;

use clap::{CommandFactory, Parser};
use rmcp::ErrorData;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListResourcesResult, ListToolsResult, MetaObject, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

use super::args::Cli;
use super::kept;
use super::output;
use super::params::{self, ValueKind};

/// The commands served as tools: those that answer a question about files with a report.
pub const TOOLS: &[&str] = &[
    "summary", "top", "tree", "leaks", "windows", "phases", "oom", "segments", "compare", "ranks",
    "timeline",
];

/// The URI of a kept file's resource.
const SCHEME: &str = "leakscope://snapshot";

/// What runs a parsed command line (the command line's own dispatch).
pub type Run = fn(Cli) -> anyhow::Result<()>;

/// Runs the server on standard input and output until the client closes it; each call is
/// a command line given to `run`.
pub fn serve(keep: usize, run: Run) -> anyhow::Result<()> {
    kept::keep(keep);
    let server = Server {
        tools: Arc::new(tools()),
        run,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        use rmcp::ServiceExt;
        let service = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| anyhow::anyhow!("MCP start-up: {e}"))?;
        service
            .waiting()
            .await
            .map_err(|e| anyhow::anyhow!("MCP server: {e}"))?;
        Ok(())
    })
}

#[derive(Clone)]
struct Server {
    tools: Arc<Vec<Tool>>,
    run: Run,
}

/// Each command of [`TOOLS`] as a tool, from the command line's own definitions.
fn tools() -> Vec<Tool> {
    let cli = Cli::command();
    TOOLS
        .iter()
        .filter_map(|name| cli.find_subcommand(name))
        .map(|cmd| {
            let about = cmd.get_about().map(|s| s.to_string()).unwrap_or_default();
            Tool::new(
                cmd.get_name().to_string(),
                format!(
                    "{about} (the document `leakscope {} --json` prints)",
                    cmd.get_name()
                ),
                Arc::new(schema(cmd)),
            )
        })
        .collect()
}

/// The arguments a command's tool takes: its positional arguments and options by their
/// names (`file`, `at`, `by`, `max_decompressed_bytes`...), typed as the command line
/// parses them, with their help lines and defaults ([`params`]).
fn schema(cmd: &clap::Command) -> JsonObject {
    let mut props = serde_json::Map::new();
    let mut required = Vec::new();
    for p in params::params(cmd) {
        let ty = match p.kind {
            ValueKind::Flag => json!("boolean"),
            // One file, or several (a series).
            _ if p.many => json!(["string", "array"]),
            ValueKind::Integer => json!("integer"),
            ValueKind::Number => json!("number"),
            ValueKind::Text => json!("string"),
        };
        let mut prop = json!({"type": ty});
        if p.many {
            prop["items"] = json!({"type": "string"});
        }
        if !p.values.is_empty() {
            prop["enum"] = json!(p.values);
        }
        if !p.help.is_empty() {
            prop["description"] = json!(p.help);
        }
        if let Some(d) = &p.default {
            prop["default"] = json!(d);
        }
        if p.required {
            required.push(p.name.clone());
        }
        props.insert(p.name, prop);
    }
    let mut s = serde_json::Map::new();
    s.insert("type".into(), json!("object"));
    s.insert("properties".into(), Value::Object(props));
    s.insert("required".into(), json!(required));
    s.insert("additionalProperties".into(), json!(false));
    s
}

/// The command line a tool call stands for: `leakscope NAME ... --json`.
fn command_line(cmd: &clap::Command, args: &JsonObject) -> Result<Vec<OsString>, String> {
    let mut argv: Vec<OsString> = vec!["leakscope".into(), cmd.get_name().into()];
    let known = params::params(cmd);
    for key in args.keys() {
        if !known.iter().any(|p| &p.name == key) {
            let names: Vec<&str> = known.iter().map(|p| p.name.as_str()).collect();
            return Err(format!(
                "`{key}`: {} takes {}",
                cmd.get_name(),
                names.join(", ")
            ));
        }
    }
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    // Positional arguments first, in order, then `--` never needed: options follow.
    let mut options: Vec<OsString> = Vec::new();
    for p in &known {
        let Some(v) = args.get(&p.name).filter(|v| !v.is_null()) else {
            continue;
        };
        let Some(long) = &p.long else {
            match v {
                Value::Array(items) => argv.extend(items.iter().map(|i| text(i).into())),
                one => argv.push(text(one).into()),
            }
            continue;
        };
        let flag = format!("--{long}");
        match (p.kind, v) {
            (ValueKind::Flag, Value::Bool(true)) => options.push(flag.into()),
            (ValueKind::Flag, Value::Bool(false)) => {}
            (ValueKind::Flag, other) => {
                return Err(format!("`{}` is true or false, not {other}", p.name));
            }
            (_, v) => {
                options.push(flag.into());
                options.push(text(v).into());
            }
        }
    }
    argv.extend(options);
    argv.push("--json".into());
    Ok(argv)
}

/// Runs one tool call: its text is the command's JSON, or the command line's error.
fn call(run: Run, name: &str, args: &JsonObject) -> CallToolResult {
    let root = Cli::command();
    let Some(cmd) = root.find_subcommand(name).filter(|_| TOOLS.contains(&name)) else {
        return error(format!(
            "no tool `{name}`: the tools are {}",
            TOOLS.join(", ")
        ));
    };
    let argv = match command_line(cmd, args) {
        Ok(a) => a,
        Err(e) => return error(format!("leakscope: {e}")),
    };
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => return error(e.render().to_string().trim_end().to_string()),
    };
    let (done, out) = output::captured(|| run(cli));
    let mut result = match done {
        Ok(()) => CallToolResult::success(vec![ContentBlock::text(out)]),
        Err(e) => error(format!("leakscope: {e:#}")),
    };
    result.meta = Some(MetaObject(loads()));
    result
}

fn error(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// `{"leakscope/loads": {path: times loaded}}`: how often this server loaded each file.
fn loads() -> JsonObject {
    let per: serde_json::Map<String, Value> = kept::sessions()
        .map(|k| k.loads())
        .unwrap_or_default()
        .into_iter()
        .map(|(p, n)| (p.display().to_string(), json!(n)))
        .collect();
    let mut m = serde_json::Map::new();
    m.insert("leakscope/loads".into(), Value::Object(per));
    m
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("leakscope", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Tools answer questions about PyTorch CUDA / torch_npu memory snapshots (the pickles of \
             torch.cuda.memory._dump_snapshot). Start with summary, then leaks (what grows per \
             micro-batch), oom (why an allocation failed), top or tree at the peak. Each result is \
             the command line's --json document; files stay loaded between calls.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name: Cow<'static, str> = request.name;
        let args = request.arguments.unwrap_or_default();
        // The command may take seconds: off the protocol's thread.
        let run = self.run;
        let result = tokio::task::spawn_blocking(move || call(run, &name, &args))
            .await
            .map_err(|e| ErrorData::internal_error(format!("the call failed: {e}"), None))?;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let files = kept::sessions().map(|k| k.files()).unwrap_or_default();
        let resources = files
            .into_iter()
            .map(|(path, s)| {
                Resource::new(format!("{SCHEME}{}", path.display()), s.name().to_string())
                    .with_description("the file's summary (leakscope summary --json)")
                    .with_mime_type("application/json")
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let path = uri.strip_prefix(SCHEME).ok_or_else(|| {
            ErrorData::resource_not_found(format!("{uri}: not a {SCHEME} URI"), None)
        })?;
        let kept = kept::sessions().map(|k| k.files()).unwrap_or_default();
        let Some((_, s)) = kept.iter().find(|(p, _)| p.display().to_string() == path) else {
            return Err(ErrorData::resource_not_found(
                format!("{path}: not loaded by this server (call a tool on it first)"),
                None,
            ));
        };
        let text = crate::render::json::pretty(&s.summary())
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, uri.clone()).with_mime_type("application/json"),
        ])
        .into())
    }
}
