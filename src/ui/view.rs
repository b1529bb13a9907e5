//! Draws the whole theater for one frame from the app model: the layout, each pane, the overlays.

use ratatui::Frame;
use ratatui::widgets::Paragraph;

use crate::ui::app::App;

/// Draws `app` into `frame`.
pub fn render(frame: &mut Frame, app: &App) {
    let title = format!("stet — {} brief(s)", app.rows().len());
    frame.render_widget(Paragraph::new(title), frame.area());
}
