// The top bar on a phone: one row with the brand and a Menu button that opens the links, so the
// header stays under 64 px instead of wrapping into three rows. Without this module the links wrap.
export function enhanceMenu() {
  const bar = document.querySelector(".topbar");
  const toggle = bar?.querySelector("[data-menu-toggle]");
  if (!toggle || bar.classList.contains("js-menu")) return;
  bar.classList.add("js-menu");
  toggle.hidden = false;
  toggle.addEventListener("click", () => {
    const open = !bar.classList.contains("menu-open");
    bar.classList.toggle("menu-open", open);
    toggle.setAttribute("aria-expanded", String(open));
  });
}
