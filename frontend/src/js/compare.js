// The jobs table's "Compare selected" button: enabled once two or more jobs of one kind are ticked
// (a comparison of different kinds has nothing in common to line up), with a line that says why not.
// The compare page's "Only differences" switch hides the rows whose values agree.
function updateCompare() {
  const button = document.querySelector("[data-compare-button]");
  if (!button) return;
  const picked = [...document.querySelectorAll("input[form=compare-form][name=job]:checked")];
  const kinds = new Set(picked.map((box) => box.dataset.kind));
  const ready = picked.length >= 2 && kinds.size === 1;
  button.disabled = !ready;
  const hint = document.querySelector("[data-compare-hint]");
  if (hint) {
    hint.textContent = ready
      ? `${picked.length} jobs selected`
      : kinds.size > 1
        ? "Tick jobs of one kind to compare them"
        : "Tick two jobs of one kind to compare them";
  }
}

export function enhanceCompare(root) {
  updateCompare();
  const scope = root?.querySelectorAll ? root : document;
  for (const toggle of scope.querySelectorAll("[data-only-differences]")) {
    if (toggle.dataset.ready) continue;
    toggle.dataset.ready = "true";
    const target = document.getElementById(toggle.getAttribute("aria-controls"));
    const apply = () => target?.classList.toggle("compare-only-differences", toggle.checked);
    toggle.addEventListener("change", apply);
    apply();
  }
}

document.addEventListener("change", (event) => {
  if (event.target.matches?.("input[form=compare-form][name=job]")) updateCompare();
});
