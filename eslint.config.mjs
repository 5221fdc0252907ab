// ESLint (flat config) for the page's modules (static/) and their unit tests (tests/js/):
// scripts/test runs it; `npx eslint .` from the checkout.
import js from "@eslint/js";
import globals from "globals";

export default [
  {ignores: ["node_modules/", ".venv/", "**/*.min.js"]},
  js.configs.recommended,
  {
    files: ["static/**/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: {...globals.browser, htmx: "readonly"},
    },
    rules: {
      "no-unused-vars": ["error", {args: "none", caughtErrors: "none"}],
      "eqeqeq": ["error", "always"],
      "no-var": "error",
      "prefer-const": "error",
    },
  },
  {
    files: ["tests/js/**/*.mjs", "eslint.config.mjs"],
    languageOptions: {ecmaVersion: 2022, sourceType: "module", globals: {...globals.node}},
  },
];
