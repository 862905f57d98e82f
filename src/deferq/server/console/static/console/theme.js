// Runs in <head>, before the page is drawn: light or dark from the saved choice, else
// from prefers-color-scheme (and follows it while the choice is "auto").
"use strict";
(function () {
  const KEY = "deferq-theme";
  const media = window.matchMedia("(prefers-color-scheme: dark)");

  function choice() {
    const saved = localStorage.getItem(KEY);
    return saved === "light" || saved === "dark" ? saved : "auto";
  }

  function apply() {
    const picked = choice();
    const theme = picked === "auto" ? (media.matches ? "dark" : "light") : picked;
    if (document.documentElement.dataset.theme !== theme) {
      document.documentElement.dataset.theme = theme;
      document.dispatchEvent(new Event("themechange"));
    }
  }

  function choose(value) {
    if (value === "auto") localStorage.removeItem(KEY);
    else localStorage.setItem(KEY, value);
    apply();
  }

  media.addEventListener("change", apply);
  window.deferqTheme = {choice, choose};
  apply();
})();
