//! Compiles `proto/` with a vendored protoc, so a fresh machine needs no system package.

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
    println!("cargo:rerun-if-changed=migrations");
    Ok(())
}
