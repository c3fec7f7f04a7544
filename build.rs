//! Compiles `proto/` with a vendored protoc, so a fresh machine needs no system package, and
//! names the sandbox's code (`TOOLHOST_SANDBOX_ID`): the daemon runs a `toolhost-sandbox`
//! installed beside it only when that binary was built from the same sandbox code.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure().file_descriptor_set_path(out_dir.join("toolhost_descriptor.bin")).compile_with_config(
        config,
        &["proto/toolhost/v1/toolhost.proto"],
        &["proto"],
    )?;
    println!("cargo:rerun-if-changed=proto");
    sandbox_identity()?;
    println!("cargo:rerun-if-changed=migrations");
    Ok(())
}

/// A digest of `src/sandbox/` (FNV-1a over each file's name and bytes, in name order): the same
/// for every binary built from the same sandbox code, different when the plan they exchange may
/// differ.
fn sandbox_identity() -> Result<(), Box<dyn std::error::Error>> {
    let mut files: Vec<_> = std::fs::read_dir("src/sandbox")?.filter_map(|entry| entry.ok().map(|entry| entry.path())).collect();
    files.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in &files {
        let name = file.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        for byte in name.bytes().chain(std::fs::read(file)?) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!("cargo:rustc-env=TOOLHOST_SANDBOX_ID={}-{hash:016x}", std::env::var("CARGO_PKG_VERSION")?);
    println!("cargo:rerun-if-changed=src/sandbox");
    Ok(())
}
