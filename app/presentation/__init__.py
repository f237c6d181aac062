"""What the gateway draws for people, in one package with one template environment (:mod:`app.presentation.templates`):
the console's pages (their templates here, their routes in ``app.console``), the charts they show
(:mod:`app.presentation.charts`), and the teacher's student report as HTML, SVG or PNG (:mod:`app.presentation.report`;
its content is built by ``app.services.report``)."""
