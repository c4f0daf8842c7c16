// Light / dark theme: follows the system until the reader picks one with the toggle, then remembers
// the choice in localStorage. base.html applies a remembered choice before the first paint; this
// module runs the toggle and tells charts to redraw in the new palette.
const KEY = "moelab-theme";
const ORDER = ["system", "light", "dark"];
const systemDark = window.matchMedia("(prefers-color-scheme: dark)");

function stored() {
  try {
    const value = localStorage.getItem(KEY);
    return ORDER.includes(value) ? value : "system";
  } catch {
    return "system"; // storage disabled (private mode): the toggle still works for this page
  }
}

export function isDark() {
  const chosen = document.documentElement.dataset.theme;
  return chosen ? chosen === "dark" : systemDark.matches;
}

function apply(choice) {
  if (choice === "system") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = choice;
  for (const button of document.querySelectorAll("[data-theme-toggle]")) {
    const label = button.querySelector("[data-theme-label]");
    if (label) label.textContent = `Theme: ${choice}`;
    button.title = `Colour theme: ${choice} (press to switch)`;
  }
  document.dispatchEvent(new CustomEvent("moelab:theme", { detail: { dark: isDark() } }));
}

export function setTheme(choice) {
  try {
    if (choice === "system") localStorage.removeItem(KEY);
    else localStorage.setItem(KEY, choice);
  } catch {
    // not remembered, still applied
  }
  apply(choice);
}

document.addEventListener("click", (event) => {
  if (!event.target.closest?.("[data-theme-toggle]")) return;
  const next = ORDER[(ORDER.indexOf(stored()) + 1) % ORDER.length];
  setTheme(next);
});

systemDark.addEventListener("change", () => apply(stored()));
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", () => apply(stored()));
else apply(stored());
