// Before the stylesheet paints: apply the remembered theme so a dark-mode reader never sees a white
// flash. A classic script loaded (blocking) in <head>, bundled on its own: the Content-Security-Policy
// allows no inline script, and a module would run only after the first paint.
try {
  const theme = localStorage.getItem("moelab-theme");
  if (theme === "light" || theme === "dark") document.documentElement.dataset.theme = theme;
} catch {
  // storage disabled (private mode): the system theme applies
}
