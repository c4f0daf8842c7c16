// Product-wide enhancers: the theme toggle and the charts' data tables (main.js imports this once).
import "./theme.js";
import "./chart-table.js";
