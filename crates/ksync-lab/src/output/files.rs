//! Where `--json`, `--csv` and `--plot` files go, and writing them.

use super::report::Report;
use std::path::{Path, PathBuf};

/// Where output files go: an absolute path as given; a relative one under
/// the results folder, which is `$KSYNC_LAB_RESULTS` if set, else
/// `lab-results/` at the root of the cargo workspace that contains the
/// current directory (git-ignored in ksync's checkout), else `lab-results/`
/// in the current directory.
pub fn resolve_output(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    results_dir().join(path)
}

fn results_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KSYNC_LAB_RESULTS") {
        return PathBuf::from(dir);
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    for dir in cwd.ancestors() {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        if manifest.lines().any(|l| l.trim() == "[workspace]") {
            return dir.join("lab-results");
        }
    }
    cwd.join("lab-results")
}

/// Writes `contents` to `path` (already resolved), creating its folder.
pub fn write_file(path: &Path, contents: &[u8]) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
    }
    std::fs::write(path, contents).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The files one invocation writes: `--json`, `--csv`, `--plot`.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    pub json: Option<PathBuf>,
    pub csv: Option<PathBuf>,
    pub plot: Option<PathBuf>,
}

impl Outputs {
    /// Fails early, before anything runs, on a file that cannot be written
    /// in the form asked for.
    pub fn check(&self) -> Result<(), String> {
        if let Some(plot) = &self.plot {
            let ext = plot
                .extension()
                .and_then(|e| e.to_str())
                .map(str::to_ascii_lowercase);
            if !matches!(ext.as_deref(), Some("svg" | "png")) {
                return Err(format!(
                    "--plot {}: the file name must end in .svg or .png",
                    plot.display()
                ));
            }
        }
        Ok(())
    }

    /// Writes `report` to every file asked for, saying where on stderr.
    pub fn write(&self, report: &Report) -> Result<(), String> {
        if let Some(path) = &self.json {
            let path = resolve_output(path);
            write_file(&path, report.to_json().as_bytes())?;
            eprintln!("ksync-lab: wrote {}", path.display());
        }
        if let Some(path) = &self.csv {
            let path = resolve_output(path);
            write_file(&path, report.to_csv().as_bytes())?;
            eprintln!("ksync-lab: wrote {}", path.display());
        }
        if let Some(path) = &self.plot {
            let path = resolve_output(path);
            super::plot::draw(report, &path)?;
            eprintln!("ksync-lab: wrote {}", path.display());
        }
        Ok(())
    }
}
