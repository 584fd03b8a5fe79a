"""Helpers for widget tests on the built static page (Playwright locators)."""

from __future__ import annotations


def static_state(page, widget) -> dict:
    """The state Python wrote into the page for this widget (the argument of staticModel)."""
    return page.evaluate("""el => JSON.parse(el.nextElementSibling.nextElementSibling.textContent
                              .match(/staticModel\\((\\{.*?\\})\\)/)[1])""", widget.element_handle())


def drag(page, slider, fraction: float) -> None:
    """Drag a range input's thumb with the mouse, from where it is to ``fraction`` of the track."""
    box = slider.bounding_box()
    lo, hi = float(slider.get_attribute("min")), float(slider.get_attribute("max"))
    at = (float(slider.input_value()) - lo) / (hi - lo)
    y, x = box["y"] + box["height"] / 2, lambda f: box["x"] + 8 + f * (box["width"] - 16)  # thumb ~16 px
    page.mouse.move(x(at), y)
    page.mouse.down()
    page.mouse.move(x(fraction), y, steps=6)
    page.mouse.up()


def set_slider(slider, value) -> float:
    """Set a range input as a reader's drag would end, firing its input event; return the value it took
    (the browser snaps it to the input's step and range)."""
    slider.evaluate("(s, v) => { s.value = v; s.dispatchEvent(new Event('input')); }", str(value))
    return float(slider.input_value())
