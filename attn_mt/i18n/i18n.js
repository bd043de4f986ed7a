// attn-mt's pages in the learner's language. The page's server hands out the same catalogues the
// command line uses, as JSON (attn_mt/web/languages.py: GET /i18n/catalogue.json, this file at
// GET /i18n/i18n.js); nothing here holds a message of its own.
//
//   t("Attention weights")                        the English text, translated
//   t("{n} keys are masked", {n: 3})              placeholders as Python's str.format writes them
//   nt("{n} run", "{n} runs", count, {n: count})  the form that fits the count
//   pt("weight of a model", "weight")             an English word with two meanings, told apart
//   <h2 data-i18n>Attention cues</h2>             the element's English text, translated in the page
//
// The language is the one the reader chose with the switch (kept in localStorage), else the one the
// server picked from the browser's Accept-Language. Choosing one translates the data-i18n elements and
// sends an "attn-mt-language" event, on which a page redraws the text it writes itself.
(function () {
  "use strict";

  const STORE = "attn-mt-lang";
  const SEPARATOR = "\u0004"; // between a context and its message, as the JSON keys hold them
  const PLURALS = { "one-form": () => 0, "n-not-1": (n) => (n !== 1 ? 1 : 0) };
  let base = "/i18n/catalogue.json";
  let catalogue = {
    lang: "en",
    html_lang: "en",
    plural: "n-not-1",
    languages: { en: "English" },
    messages: {},
  };

  function fill(text, params) {
    return text.replace(/\{\{|\}\}|\{(\w+)\}/g, (whole, name) => {
      if (whole === "{{") return "{";
      if (whole === "}}") return "}";
      return params && name in params ? String(params[name]) : whole;
    });
  }

  function t(msgid, params) {
    const found = catalogue.messages[msgid];
    return fill(typeof found === "string" ? found : msgid, params);
  }

  function pt(context, msgid, params) {
    const found = catalogue.messages[context + SEPARATOR + msgid];
    return fill(typeof found === "string" ? found : msgid, params);
  }

  function nt(singular, plural, n, params) {
    const found = catalogue.messages[singular];
    if (Array.isArray(found)) {
      const index = PLURALS[catalogue.plural](n);
      return fill(found[Math.min(index, found.length - 1)], params);
    }
    return fill(n === 1 ? singular : plural, params);
  }

  function formatNumber(value, digits, grouping) {
    return new Intl.NumberFormat(catalogue.html_lang, {
      minimumFractionDigits: digits,
      maximumFractionDigits: digits,
      useGrouping: Boolean(grouping),
    }).format(value);
  }

  function translatePage(root) {
    for (const element of (root || document).querySelectorAll("[data-i18n]")) {
      if (element.dataset.i18nSource === undefined) {
        element.dataset.i18nSource = element.textContent.split(/\s+/).filter(Boolean).join(" ");
      }
      element.textContent = t(element.dataset.i18nSource);
    }
  }

  function stored() {
    try {
      return window.localStorage.getItem(STORE);
    } catch (error) {
      return null; // storage refused (a private window's settings): the browser's languages decide
    }
  }

  async function apply(lang) {
    const response = await fetch(lang ? `${base}?lang=${encodeURIComponent(lang)}` : base);
    if (!response.ok) throw new Error(`${base}: HTTP ${response.status}`);
    catalogue = await response.json();
    document.documentElement.lang = catalogue.html_lang;
    translatePage(document);
    document.dispatchEvent(new CustomEvent("attn-mt-language", { detail: catalogue.lang }));
    return catalogue.lang;
  }

  function load(url) {
    base = url || base;
    return apply(stored());
  }

  function choose(lang) {
    try {
      window.localStorage.setItem(STORE, lang);
    } catch (error) {
      // not kept: this page still switches
    }
    return apply(lang);
  }

  function switcher(select) {
    select.replaceChildren();
    for (const [code, name] of Object.entries(catalogue.languages)) {
      const option = document.createElement("option");
      option.value = code;
      option.textContent = name;
      option.lang = code;
      option.selected = code === catalogue.lang;
      select.append(option);
    }
    select.onchange = () => choose(select.value);
    document.addEventListener("attn-mt-language", () => {
      select.value = catalogue.lang;
    });
    return select;
  }

  window.attnMtI18n = {
    t,
    nt,
    pt,
    formatNumber,
    translatePage,
    load,
    choose,
    switcher,
    language: () => catalogue.lang,
  };
})();
