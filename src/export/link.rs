//! Linking, by the system tools run in the build directory: the library source compiled by the C
//! compiler, combined with the operators' objects into one relocatable object whose hidden
//! symbols are made local (`ld -r`, `objcopy`), then linked as the shared library (`cc -shared`)
//! and archived as the static one (`ar`).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::ExportError;

/// The C compiler, `ld`, `objcopy` and `ar`, run in the build directory on the files in it.
pub(super) struct Toolchain<'a> {
    cc: PathBuf,
    build_dir: &'a Path,
}

impl<'a> Toolchain<'a> {
    /// The C compiler `cc` (default: `$CC`, else `cc`) and the binutils, run in `build_dir`.
    pub(super) fn new(cc: Option<&Path>, build_dir: &'a Path) -> Toolchain<'a> {
        let cc = cc
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("CC").map(PathBuf::from))
            .unwrap_or_else(|| "cc".into());
        Toolchain { cc, build_dir }
    }

    fn run(&self, program: &Path, args: &[&str]) -> Result<(), ExportError> {
        let command = format!("{} {}", program.display(), args.join(" "));
        let output = Command::new(program).args(args).current_dir(self.build_dir).output().map_err(|e| {
            ExportError::Tool { command: command.clone(), status: "not started".into(), stderr: e.to_string() }
        })?;
        if output.status.success() {
            Ok(())
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            Err(ExportError::Tool { command, status: output.status.to_string(), stderr })
        }
    }

    /// The library source `source` compiled as `<name>_lib.o`; returns that file's name.
    pub(super) fn compile_library_source(&self, name: &str, source: &str) -> Result<String, ExportError> {
        let lib_object = format!("{name}_lib.o");
        self.run(
            &self.cc,
            &["-std=c11", "-O3", "-ffp-contract=off", "-fPIC", "-fvisibility=hidden", "-c", source, "-o", &lib_object],
        )?;
        Ok(lib_object)
    }

    /// `lib_object` and the operators' `objects` as `<name>.o`; returns that file's name.
    pub(super) fn link_relocatable(
        &self,
        name: &str,
        lib_object: &str,
        objects: &[String],
    ) -> Result<String, ExportError> {
        // One relocatable object whose hidden symbols (entries, runtime) are made local, so the
        // static archive too exposes only the `NAME_` functions.
        let combined = format!("{name}.o");
        let mut ld_args = vec!["-r", "-o", combined.as_str(), lib_object];
        ld_args.extend(objects.iter().map(String::as_str));
        self.run(Path::new("ld"), &ld_args)?;
        self.run(Path::new("objcopy"), &["--localize-hidden", &combined])?;
        Ok(combined)
    }

    /// `combined` linked as `lib<name>.so`, exporting what `version_script` says; returns that
    /// file's name.
    pub(super) fn link_shared(&self, name: &str, combined: &str, version_script: &str) -> Result<String, ExportError> {
        let so_name = format!("lib{name}.so");
        let version_arg = format!("-Wl,--version-script={version_script}");
        let soname_arg = format!("-Wl,-soname,{so_name}");
        self.run(
            &self.cc,
            &[
                "-shared",
                "-o",
                &so_name,
                combined,
                &version_arg,
                &soname_arg,
                "-Wl,-z,noexecstack",
                "-Wl,-z,relro",
                "-Wl,-z,now",
                // Worker threads sleep inside the library: never unmap it.
                "-Wl,-z,nodelete",
                "-Wl,--build-id=sha1",
                "-lpthread",
            ],
        )?;
        Ok(so_name)
    }

    /// `combined` archived, deterministically, as `lib<name>.a` (replacing any earlier one);
    /// returns that file's name.
    pub(super) fn archive(&self, name: &str, combined: &str) -> Result<String, ExportError> {
        let archive_name = format!("lib{name}.a");
        let _ = std::fs::remove_file(self.build_dir.join(&archive_name));
        self.run(Path::new("ar"), &["rcsD", &archive_name, combined])?;
        Ok(archive_name)
    }
}
