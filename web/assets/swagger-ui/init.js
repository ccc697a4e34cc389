// keepstate: start Swagger UI on the spec served by this process (relative
// URL, so it also works behind a path-prefix proxy).
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: new URL("../api-docs", window.location.href).toString(),
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    tryItOutEnabled: false,
    validatorUrl: null
  });
});
