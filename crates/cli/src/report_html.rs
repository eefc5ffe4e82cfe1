//! `--report FILE.html` of `blis sweep` and `blis plan`: one self-contained
//! page (inline CSS and SVG, no script, nothing fetched) with the summary,
//! the frontier plot and the tables.

/// Text made safe inside HTML.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A table: a caption, its header, its rows (all text, escaped here).
pub struct Table<'a> {
    /// Shown above it.
    pub caption: &'a str,
    /// Column names.
    pub header: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

/// The page: `title`, the `summary` lines, the `svg` plot, then the tables.
pub fn page(title: &str, summary: &[String], svg: &str, tables: &[Table<'_>]) -> String {
    let mut html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>\
body{{font-family:system-ui,sans-serif;margin:24px;color:#222}}h1{{font-size:20px}}p.s{{margin:4px 0;font-family:monospace;white-space:pre-wrap}}\
table{{border-collapse:collapse;font-size:12px;margin:8px 0 24px}}th,td{{border:1px solid #ccc;padding:2px 6px;text-align:right}}\
th{{background:#f3f3f3;position:sticky;top:0}}td.t{{text-align:left}}caption{{text-align:left;font-weight:bold;padding:4px 0}}\
</style></head><body>\n<h1>{t}</h1>\n",
        t = escape(title)
    );
    for line in summary {
        html.push_str(&format!("<p class=\"s\">{}</p>\n", escape(line)));
    }
    html.push_str("<figure>");
    html.push_str(svg.trim_start_matches(|c| c != '<'));
    html.push_str("</figure>\n");
    for t in tables {
        html.push_str(&format!("<table><caption>{}</caption><thead><tr>", escape(t.caption)));
        for h in &t.header {
            html.push_str(&format!("<th>{}</th>", escape(h)));
        }
        html.push_str("</tr></thead><tbody>\n");
        for row in &t.rows {
            html.push_str("<tr>");
            for cell in row {
                let class = if cell.parse::<f64>().is_ok() || cell.is_empty() { "" } else { " class=\"t\"" };
                html.push_str(&format!("<td{class}>{}</td>", escape(cell)));
            }
            html.push_str("</tr>\n");
        }
        html.push_str("</tbody></table>\n");
    }
    html.push_str("</body></html>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_escapes_text_and_holds_the_plot_and_every_row() {
        let t = Table {
            caption: "all",
            header: vec!["a<b".into(), "n".into()],
            rows: vec![vec!["x & y".into(), "1.5".into()], vec!["z".into(), "".into()]],
        };
        let html = page("T <1>", &["line \"one\"".into()], "<svg width=\"1\"></svg>", &[t]);
        assert!(html.contains("<title>T &lt;1&gt;</title>") && html.contains("line &quot;one&quot;"));
        assert!(html.contains("<figure><svg width=\"1\"></svg></figure>"));
        assert!(html.contains("<th>a&lt;b</th>") && html.contains("<td class=\"t\">x &amp; y</td><td>1.5</td>"));
        assert_eq!(html.matches("<tr>").count(), 3);
        assert!(!html.contains("<script") && !html.contains("http"), "self-contained");
    }
}
